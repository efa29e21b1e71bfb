#!/usr/bin/env python3
"""`cmake --install BUILD --prefix P` into an empty folder gives a working infer.

- P holds bin/infer, the man page, share/infer/cluster.sh and deploy/, the docs, the systemd
  unit (naming P/bin/infer and P/etc/default/infer) and the environment file;
- P/bin/infer names the same build as BUILD/infer, serves the chat page at / and answers
  /v1/chat/completions on a dummy model (a tiny model with the real Llama 3 vocabulary);
- the man page's examples are the README's commands, and it lists every subcommand of
  `infer --help`, each of which docs/cli.md describes;
- the installed cluster.sh finds P/bin/infer by itself (no INFER_BINARY, P/bin not on PATH),
  keeps its run folder under $XDG_STATE_HOME, and starts, reports and stops a replica.

Usage: tests/integration/install_test.py   (INFER_BUILD_DIR: the build folder to install from)
"""
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import tiny_llama3_model  # noqa: E402
BUILD = os.environ.get("INFER_BUILD_DIR", os.path.join(ROOT, "build"))
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message, flush=True)


def request(port, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def check_files(prefix):
    expected = [
        "bin/infer", "share/man/man1/infer.1.gz", "share/infer/cluster.sh",
        "share/infer/deploy/Dockerfile", "share/infer/deploy/kubernetes.yaml",
        "share/infer/deploy/haproxy.cfg", "share/infer/deploy/haproxy-affinity.cfg",
        "share/infer/deploy/prometheus.yml", "share/doc/infer/README.md.gz",
        "share/doc/infer/CHANGELOG.md.gz", "share/doc/infer/copyright",
        "share/doc/infer/docs/serving.md.gz", "lib/systemd/system/infer.service",
        "etc/default/infer",
    ]
    for path in expected:
        check(os.path.isfile(os.path.join(prefix, path)), f"{path} is not installed")
    for program in ("bin/infer", "share/infer/cluster.sh"):
        check(os.access(os.path.join(prefix, program), os.X_OK), f"{program} is not executable")
    with open(os.path.join(prefix, "lib/systemd/system/infer.service")) as f:
        unit = f.read()
    check(f"\nExecStart={prefix}/bin/infer serve " in unit, "the unit's ExecStart: " + unit)
    check(f"\nEnvironmentFile={prefix}/etc/default/infer\n" in unit, "the unit's EnvironmentFile")
    with open(os.path.join(prefix, "etc/default/infer")) as f:
        defined = set(re.findall(r"^([A-Z_]+)=", f.read(), re.M))
    used = set(re.findall(r"\$\{?([A-Z_]+)\}?", unit.split("ExecStart=", 1)[1].split("\n")[0]))
    check(used <= defined, f"the unit uses {sorted(used - defined)}, which /etc/default/infer lacks")
    check("INFER_API_KEY_FILE" in defined, "/etc/default/infer has no INFER_API_KEY_FILE")


def check_man_page(prefix, infer):
    with gzip.open(os.path.join(prefix, "share/man/man1/infer.1.gz"), "rt") as f:
        man = f.read()
    text = man.replace("\\-", "-")
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read().replace("\\\n  ", "")  # a command continued over lines: one line
    examples = text.split(".SH EXAMPLES", 1)[1].split(".nf\n", 1)[1].split("\n.fi", 1)[0]
    check(len(examples.splitlines()) == 3, "the man page's EXAMPLES: " + examples)
    for line in examples.splitlines():
        check(line.startswith("infer ") and "build/" + line in readme,
              f"man page example not in README.md: {line}")
    help_text = subprocess.run([infer, "--help"], capture_output=True, text=True).stdout
    subcommands = re.findall(r"^  (\S+) {2,}", help_text.split("Subcommands:", 1)[1], re.M)
    check(len(subcommands) >= 10, "subcommands of infer --help: " + help_text)
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        cli_md = f.read()
    for name in subcommands:
        check(f".TP\n{name}\n" in text, f"the man page does not list {name}")
        check(f"infer {name}" in cli_md, f"docs/cli.md does not describe `infer {name}`")
    check(".TH INFER \"1\"" in man, "man page header")


def check_serving(prefix, model):
    infer = os.path.join(prefix, "bin", "infer")
    version = subprocess.run([infer, "--version"], capture_output=True, text=True)
    built = subprocess.run([os.path.join(BUILD, "infer"), "--version"], capture_output=True,
                           text=True)
    check(version.returncode == 0 and version.stdout.splitlines()[0] ==
          built.stdout.splitlines()[0], f"--version: {version.stdout!r} vs {built.stdout!r}")
    server = subprocess.Popen(
        [infer, "serve", "--model", model, "--load-format", "dummy", "--served-model-name",
         "tiny", "--threads", "1", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port, log = None, []
        for line in server.stderr:
            log.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        check(port is not None, "the installed infer did not listen: " + "".join(log))
        if port is None:
            return
        status, content_type, page = request(port, "GET", "/")
        check(status == 200 and content_type.startswith("text/html") and
              "<title>infer chat</title>" in page, f"GET /: {status} {content_type}")
        status, _, body = request(port, "POST", "/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 4})
        reply = json.loads(body) if status == 200 else {}
        check(status == 200 and reply.get("object") == "chat.completion" and
              reply["choices"][0]["message"]["role"] == "assistant" and
              reply["usage"]["completion_tokens"] >= 1, f"chat completion: {status} {body}")
        server.send_signal(signal.SIGTERM)
        check(server.wait(timeout=60) == 0, "the installed infer's exit after SIGTERM")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def check_cluster(prefix, model, scratch):
    cluster = os.path.join(prefix, "share", "infer", "cluster.sh")
    path = ":".join(p for p in os.environ.get("PATH", "").split(":")
                    if not os.path.isfile(os.path.join(p, "infer")))
    env = {k: v for k, v in os.environ.items() if k not in ("INFER_BINARY", "INFER_CLUSTER_DIR")}
    env.update(PATH=path, XDG_STATE_HOME=os.path.join(scratch, "state"))
    run_dir = os.path.join(scratch, "state", "infer", "cluster")

    def run(*args):
        return subprocess.run([cluster, *args], env=env, cwd=scratch, capture_output=True,
                              text=True, timeout=300)

    try:
        up = run("up", "1", "--model", os.path.relpath(model, scratch), "--load-format",
                 "dummy", "--served-model-name", "tiny", "--threads", "1")
        check(up.returncode == 0, f"installed cluster.sh up: {up.stdout}{up.stderr}")
        if up.returncode != 0:
            return
        port = int(up.stdout.strip().splitlines()[-1].rsplit(":", 1)[1])
        check(request(port, "GET", "/health")[0] == 200, "the balancer's /health")
        status = run("status").stdout.split()
        check(len(status) == 7 and status[6] == "healthy", f"cluster.sh status: {status}")
        with open(os.path.join(run_dir, "r1.pid")) as f:
            exe = os.readlink(f"/proc/{f.read().strip()}/exe")
        check(exe == os.path.join(prefix, "bin", "infer"), f"the replica runs {exe}")
    finally:
        down = run("down")
        check(down.returncode == 0 and "stopped" in down.stdout, f"cluster.sh down: {down.stdout}")


def main():
    scratch = tempfile.mkdtemp(prefix="infer-install-")
    try:
        prefix = os.path.join(scratch, "prefix")
        os.makedirs(prefix)
        env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
        install = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], env=env,
                                 capture_output=True, text=True)
        check(install.returncode == 0, f"cmake --install: {install.stdout}{install.stderr}")
        if install.returncode == 0:
            model = tiny_llama3_model.write(os.path.join(scratch, "model"))
            check_files(prefix)
            check_man_page(prefix, os.path.join(prefix, "bin", "infer"))
            check_serving(prefix, model)
            check_cluster(prefix, model, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("FAILED" if FAILURES else "passed", flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
