#!/usr/bin/env python3
"""deploy/kubernetes.yaml and deploy/Dockerfile agree with `infer serve` and with the package.

No cluster or container runtime is here, so this checks what can be checked without one:
- the manifest parses (PyYAML); its container's args are an `infer serve` command line whose
  every flag `infer serve --help` lists; the container port is --port; every probe goes to that
  port, and the HTTP ones to /health; the model volume is mounted read-only where --model
  points; the CPU request is --threads; the memory request and limit exceed --kv-cache-memory;
  terminationGracePeriodSeconds exceeds --shutdown-timeout plus the preStop pause; the image is
  tagged with CMake's project version;
- the Dockerfile starts FROM debian:12-slim, copies and installs the file name CPack gives the
  package (infer_<version>_amd64.deb, the glob matching it), runs as the user the package makes,
  and its ENTRYPOINT is the binary the package installs; its CMD is a valid serve command on
  the port it EXPOSEs.

Usage: tests/integration/deploy_test.py   (INFER_BINARY, INFER_BUILD_DIR: the build's)
"""
import fnmatch
import json
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("INFER_BUILD_DIR", os.path.join(ROOT, "build"))
INFER = os.environ.get("INFER_BINARY", os.path.join(BUILD, "infer"))
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message, flush=True)


def serve_flags():
    help_text = subprocess.run([INFER, "serve", "--help"], capture_output=True, text=True,
                               check=True).stdout
    return set(re.findall(r"(--[a-z0-9-]+)", help_text))


def flag_values(args):
    """--flag value pairs of a serve command line (flags without a value map to True)."""
    values, i = {}, 1
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            values[args[i]] = args[i + 1]
            i += 2
        else:
            values[args[i]] = True
            i += 1
    return values


def check_serve_command(args, flags, where):
    check(args and args[0] == "serve", f"{where}: not a serve command: {args}")
    for arg in args[1:]:
        if arg.startswith("--"):
            check(arg in flags, f"{where}: `infer serve` has no {arg}")
    return flag_values(args)


def gibibytes(quantity):
    units = {"Gi": 2**30, "Mi": 2**20, "GiB": 2**30, "MiB": 2**20, "G": 1e9, "M": 1e6}
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity)).groups()
    return float(number) * units.get(unit, 1) / 2**30


def project_version():
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        return re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", f.read(), re.M).group(1)


def check_manifest(flags, version):
    with open(os.path.join(ROOT, "deploy", "kubernetes.yaml")) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    service = next(d for d in documents if d["kind"] == "Service")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    serve = check_serve_command(container["args"], flags, "kubernetes.yaml")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(str(ports.get("http")) == serve.get("--port"), f"containerPort {ports} vs --port")
    check(serve.get("--host") == "0.0.0.0", "--host must be 0.0.0.0 in a pod")
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(name)
        check(probe is not None, f"no {name}")
        if probe is None:
            continue
        action = probe.get("httpGet") or probe.get("tcpSocket")
        check(action is not None and ports.get(action["port"], action["port"]) ==
              ports.get("http"), f"{name} is not on --port")
        if "httpGet" in probe:
            check(probe["httpGet"]["path"] == "/health", f"{name} path")
    check("httpGet" in container["readinessProbe"], "readiness must be /health (503 draining)")
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    model = serve.get("--model", "")
    mount = next((m for p, m in mounts.items() if model.startswith(p.rstrip("/") + "/")), None)
    check(mount is not None and mount.get("readOnly"), f"--model {model} is not on a read-only mount")
    if mount:
        volumes = {v["name"] for v in pod["volumes"]}
        check(mount["name"] in volumes, f"mount {mount['name']} has no volume")
    resources = container["resources"]
    check(str(resources["requests"]["cpu"]) == serve.get("--threads"), "cpu request vs --threads")
    kv = gibibytes(serve.get("--kv-cache-memory", "0").replace("iB", "i"))
    for kind in ("requests", "limits"):
        memory = gibibytes(resources[kind]["memory"])
        check(memory >= kv + 2.5, f"memory {kind} {memory} GiB < weights + KV {kv} GiB")
    grace = pod["terminationGracePeriodSeconds"]
    pause = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pause_s = int(pause[-1]) if pause and pause[0] == "sleep" else 0
    check(grace > int(serve.get("--shutdown-timeout", 0)) + pause_s,
          "terminationGracePeriodSeconds must exceed --shutdown-timeout + preStop")
    image = container["image"]
    check(image.rsplit("/", 1)[-1] == f"infer:{version}", f"image {image} is not infer:{version}")
    check(service["spec"]["ports"][0]["targetPort"] in ports, "the Service's targetPort")
    env = {e["name"] for e in container.get("env", [])}
    check("INFER_REPLICA_ID" in env, "INFER_REPLICA_ID from the pod name")


def check_dockerfile(flags, version):
    with open(os.path.join(ROOT, "deploy", "Dockerfile")) as f:
        lines = [l for l in f.read().replace("\\\n", " ").splitlines()
                 if l.strip() and not l.startswith("#")]
    instructions = [(l.split(None, 1)[0], l.split(None, 1)[1].strip()) for l in lines]
    check(instructions[0] == ("FROM", "debian:12-slim"), f"FROM: {instructions[0]}")
    by_name = {}
    for name, value in instructions:
        by_name.setdefault(name, []).append(value)
    package = f"infer_{version}_amd64.deb"
    copy = by_name.get("COPY", [""])[0].split()
    check(copy and fnmatch.fnmatch(package, copy[0]), f"COPY {copy} does not take {package}")
    run = " ".join(by_name.get("RUN", []))
    check(re.search(r"apt-get install -y --no-install-recommends /tmp/infer_\*_amd64\.deb", run)
          is not None, f"RUN does not install the package: {run}")
    check(by_name.get("USER") == ["infer"], "USER infer (the package's postinst makes it)")
    entrypoint = json.loads(by_name["ENTRYPOINT"][0])
    check(entrypoint == ["/usr/bin/infer"], f"ENTRYPOINT {entrypoint}")
    serve = check_serve_command(json.loads(by_name["CMD"][0]), flags, "Dockerfile CMD")
    check(by_name.get("EXPOSE") == [serve.get("--port")], "EXPOSE vs CMD's --port")
    # The package installs the binary where ENTRYPOINT looks (the install rules' bin/).
    with open(os.path.join(ROOT, "cmake", "install.cmake")) as f:
        rules = f.read()
    check("install(TARGETS infer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})" in rules and
          "set(CPACK_INSTALL_PREFIX /usr)" in rules, "the package's binary is not /usr/bin/infer")


def main():
    flags = serve_flags()
    version = project_version()
    check_manifest(flags, version)
    check_dockerfile(flags, version)
    print("FAILED" if FAILURES else "passed", flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
