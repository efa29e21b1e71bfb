#!/usr/bin/env bash
# The Debian package's round trip, as CI runs it (root, or sudo; needs a built BUILD_DIR):
#   1. cpack -G DEB; the file is infer_<CMake's version>_amd64.deb; `dpkg-deb -I` shows it;
#      every shared library the binary needs comes from a package its Depends names;
#   2. lintian reports no errors;
#   3. dpkg -i installs it (the user infer, the unit, /etc/default/infer);
#   4. the unit's command runs once as systemd would run it (ExecStart with the variables of
#      its EnvironmentFile, as its User, with a clean environment) against a dummy model, with
#      the settings an operator writes into /etc/default/infer (model, port, threads, API key
#      file); /health, /metrics (key required, infer_build_info), a chat completion; SIGTERM;
#   5. dpkg -i again (the upgrade path) keeps the settings and the user; dpkg -r removes every
#      file but the conffile; dpkg -P removes that, the user and its home.
# Usage: scripts/package_check.sh [BUILD_DIR]     (BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
sudo_cmd=()
[[ "$(id -u)" != "0" ]] && sudo_cmd=(sudo)
say() { echo "package_check: $*"; }
die() { echo "package_check: FAIL: $*" >&2; exit 1; }

if dpkg-query -W -f='${Status}' infer 2>/dev/null | grep -q installed; then
  die "a package named infer is installed already: remove it first (dpkg -P infer)"
fi

# 1. The package.
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")"
[[ -n "$version" ]] || die "no CMAKE_PROJECT_VERSION in $build/CMakeCache.txt"
rm -f "$build"/infer_*.deb
(cd "$build" && cpack -G DEB >/dev/null)
deb="$build/infer_${version}_amd64.deb"
[[ -f "$deb" ]] || die "cpack wrote no $deb"
dpkg-deb -I "$deb"
depends="$(dpkg-deb -f "$deb" Depends)"
depend_names="$(sed 's/ *([^)]*)//g; s/[,|]/\n/g; s/ //g' <<<"$depends")"
for soname in $(objdump -p "$build/infer" | awk '$1 == "NEEDED" {print $2}'); do
  path="$(ldconfig -p | awk -v name="$soname" '$1 == name && /x86-64/ && !found {print $NF; found = 1}')"
  [[ -n "$path" ]] || die "$soname: not found by ldconfig"
  # dpkg knows a library by the path its package shipped (/lib or /usr/lib under usrmerge).
  package=""
  for candidate in "$path" "$(readlink -f "$path")"; do
    [[ -n "$package" ]] || package="$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1)" || true
  done
  [[ -n "$package" ]] || die "$soname ($path): no package owns it"
  # Depends may name it or a virtual package it provides (libspdlog1.10 provides -fmt9).
  provides="$(dpkg-query -W -f='${Provides}' "$package" | sed 's/ *([^)]*)//g; s/,/ /g')"
  named=0
  for name in "$package" $provides; do
    if grep -Fxq "$name" <<<"$depend_names"; then named=1; fi
  done
  ((named)) || die "$soname comes from $package, which Depends does not name: $depends"
done
say "Depends names the package of every library the binary needs"

# 2. lintian: no errors (warnings are printed).
lintian --fail-on error "$deb" 2> >(grep -v 'running with root privileges' >&2)
say "lintian: no errors"

# 3. Install.
"${sudo_cmd[@]}" dpkg -i "$deb"
model="$(mktemp -d /tmp/infer-package-check.XXXXXX)"
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null
  "${sudo_cmd[@]}" rm -rf "$model"
  if dpkg-query -W -f='${Status}' infer 2>/dev/null | grep -q 'ok installed\|config-files'; then
    "${sudo_cmd[@]}" dpkg -P infer >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
getent passwd infer >/dev/null || die "the package made no user infer"
unit=/usr/lib/systemd/system/infer.service
[[ -f "$unit" && -f /etc/default/infer && -x /usr/bin/infer ]] || die "the package's files are missing"
/usr/bin/infer --version | grep -q "^infer ${version} " || die "infer --version does not say $version"
[[ -f /usr/share/man/man1/infer.1.gz ]] || die "no man page"

# 4. The unit's command, as an operator would configure it: a tiny model with the real Llama 3
# vocabulary and random weights, an API key file readable by the group infer.
python3 tests/testing/tiny_llama3_model.py "$model"
chmod 755 "$model"
chmod 644 "$model"/*
key="package-check-$$-$RANDOM"
printf '%s\n' "$key" >"$model/api-key"
"${sudo_cmd[@]}" chown root:infer "$model/api-key"
"${sudo_cmd[@]}" chmod 640 "$model/api-key"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${sudo_cmd[@]}" sed -i \
  -e "s|^INFER_MODEL=.*|INFER_MODEL=$model|" -e "s|^INFER_PORT=.*|INFER_PORT=$port|" \
  -e "s|^INFER_THREADS=.*|INFER_THREADS=1|" -e "s|^INFER_API_KEY_FILE=.*|INFER_API_KEY_FILE=$model/api-key|" \
  -e "s|^INFER_OPTIONS=.*|INFER_OPTIONS=--load-format dummy --served-model-name check --completions-format openai|" \
  /etc/default/infer
log="$model/serve.log"
# systemd's rules for ExecStart: ${VAR} is one argument, a lone $VAR is split on whitespace;
# the environment is the EnvironmentFile's variables plus the user's HOME, USER, LOGNAME,
# SHELL and a PATH; the process runs as User and Group (supplementary groups of the user).
"${sudo_cmd[@]}" python3 - "$unit" >"$log" 2>&1 <<'EOF' &
import grp, os, pwd, re, shlex, sys
unit = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if "=" in line and not line.startswith(("#", ";", "[")):
        key, value = line.split("=", 1)
        unit[key] = value
env_path = unit["EnvironmentFile"].lstrip("-")
environment = {}
for line in open(env_path):
    line = line.strip()
    if line and not line.startswith(("#", ";")):
        key, value = line.split("=", 1)
        words = shlex.split(value)
        environment[key] = " ".join(words)
argv = []
for word in shlex.split(unit["ExecStart"]):
    whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
    if whole:
        argv += environment.get(whole.group(1), "").split()
    else:
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                           lambda m: environment.get(m.group(1), ""), word))
user = pwd.getpwnam(unit["User"])
group = grp.getgrnam(unit["Group"])
environment.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name,
                   SHELL=user.pw_shell, PATH="/usr/local/bin:/usr/bin:/bin")
print("unit command:", " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
os.setgroups([])
os.initgroups(user.pw_name, group.gr_gid)
os.setgid(group.gr_gid)
os.setuid(user.pw_uid)
os.chdir("/")
os.execve(argv[0], argv, environment)
EOF
server_pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 300); do
  [[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" == "200" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; die "the unit's command exited"; }
  sleep 0.2
done
[[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" == "200" ]] ||
  { cat "$log" >&2; die "/health did not answer 200"; }
[[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/metrics")" == "401" ]] ||
  die "/metrics without the key file's key is not 401"
metrics="$(curl -sf -H "Authorization: Bearer $key" "$url/metrics")"
grep -q "^infer_build_info{.*version=\"$version\"" <<<"$metrics" || die "no infer_build_info $version"
reply="$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"model": "check", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}' \
  "$url/v1/chat/completions")"
python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["usage"]["completion_tokens"] >= 1, r' \
  "$reply" || die "chat completion: $reply"
ps -o user= -p "$(pgrep -P "$server_pid" -x infer || echo "$server_pid")" | grep -qx infer ||
  die "the server does not run as the user infer"
kill -TERM "$server_pid"
wait "$server_pid" || die "the server's exit after SIGTERM was not 0"
server_pid=""
grep -q "unit command: /usr/bin/infer serve --model $model " "$log" || { cat "$log" >&2; die "unit command"; }
say "the unit's command served /health, /metrics (key from the file) and a chat completion as infer"

# Reinstalling (dpkg's upgrade path: prerm upgrade, postinst configure OLD-VERSION) keeps the
# operator's settings and the user.
"${sudo_cmd[@]}" dpkg -i "$deb" >/dev/null
grep -q "^INFER_MODEL=$model\$" /etc/default/infer || die "reinstalling lost /etc/default/infer's settings"
getent passwd infer >/dev/null || die "reinstalling lost the user infer"
say "reinstalled over itself: settings and user kept"

# 5. Remove, then purge.
files="$(dpkg-deb -c "$deb" | awk '{print substr($6, 2)}' | grep -v '/$')"
"${sudo_cmd[@]}" dpkg -r infer
for file in $files; do
  if [[ "$file" == /etc/default/infer ]]; then
    [[ -f "$file" ]] || die "dpkg -r removed the conffile $file (it keeps conffiles)"
  elif [[ -e "$file" ]]; then
    die "dpkg -r left $file"
  fi
done
"${sudo_cmd[@]}" dpkg -P infer
[[ ! -e /etc/default/infer ]] || die "dpkg -P left /etc/default/infer"
for dir in /usr/share/infer /usr/share/doc/infer /var/lib/infer; do
  [[ ! -e "$dir" ]] || die "dpkg -P left $dir"
done
getent passwd infer >/dev/null && die "dpkg -P left the user infer"
getent group infer >/dev/null && die "dpkg -P left the group infer"
dpkg-query -W infer >/dev/null 2>&1 && die "dpkg still knows the package"
say "dpkg -r removed all but the conffile; dpkg -P removed it, the user and its home"
say "passed ($deb)"
