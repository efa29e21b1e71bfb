#!/usr/bin/env python3
"""Three `infer serve` replicas behind HAProxy (scripts/cluster.sh), 300 streaming requests from
16 concurrent clients, one replica SIGKILLed in the middle (issue 15's acceptance):

- every request that had not started streaming completes on another replica;
- the ones streaming from the killed replica end with a connection error, counted, never a
  silently truncated success;
- none is duplicated: the replicas' access logs hold exactly one completed request per
  completed response the clients got;
- the cluster keeps serving, the replica restarts and rejoins (it answers requests again);
- `cluster.sh down` leaves no process behind.

Usage: tests/integration/cluster_test.py   (INFER_BINARY=build/infer; needs haproxy, curl)
"""
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "llama", "model")
REQUESTS = 300
CLIENTS = 16
MAX_TOKENS = 300


def cluster(env, *args):
    return subprocess.run([CLUSTER, *args], env=env, capture_output=True, text=True, check=True,
                          timeout=600).stdout


def stream(port, body, timeout=120):
    """One request: (replica, outcome, token events, usage completion tokens, detail).
    outcome: complete | cut (the response started, then the connection failed or the stream
    ended without a final event) | failed (an HTTP error, or a connection error before the
    response began)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    replica, tokens, started = None, 0, False
    try:
        connection.request("POST", "/v1/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        replica = response.getheader("X-Replica-Id")
        if response.status != 200:
            return replica, "failed", 0, None, f"HTTP {response.status}: {response.read()[:200]!r}"
        started = True  # the response began (status and headers): it cannot be retried now
        buffer = b""
        while True:
            chunk = response.read1(65536)
            if not chunk:
                return replica, "cut", tokens, None, "ended without done"
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                lines = event.decode().split("\n")
                name = next((l[7:] for l in lines if l.startswith("event: ")), "message")
                data = next((l[6:] for l in lines if l.startswith("data: ")), None)
                if data is None:
                    continue
                if name == "token":
                    tokens += 1
                elif name == "done":
                    done = json.loads(data)
                    # An EOS token ends the stream without a token event of its own.
                    usage = done["usage"]["completion_tokens"]
                    if done["finish_reason"] == "eos":
                        usage -= 1
                    return replica, "complete", tokens, usage, done["finish_reason"]
                elif name == "error":
                    return replica, "cut", tokens, None, data
    except (OSError, http.client.HTTPException) as error:
        return replica, "cut" if started else "failed", tokens, None, repr(error)
    finally:
        connection.close()


def main():
    infer = os.environ.get("INFER_BINARY", os.path.join(ROOT, "build", "infer"))
    run_dir = tempfile.mkdtemp(prefix="infer-cluster-")
    env = dict(os.environ, INFER_CLUSTER_DIR=run_dir, INFER_BINARY=infer)
    status = 1
    try:
        status = run(env, run_dir)
        return status
    finally:
        subprocess.run([CLUSTER, "down"], env=env, capture_output=True, timeout=120)
        if status == 0:  # a failed run keeps its logs
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            print("logs kept in", run_dir)


def run(env, run_dir):
    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)
            print("FAIL:", message)

    out = cluster(env, "up", "3", "--model", MODEL, "--served-model-name", "tiny", "--threads",
                  "1", "--max-model-len", "512")
    url = out.strip().splitlines()[-1]
    port = int(url.rsplit(":", 1)[1])
    print("balancer:", url)
    pids = {}
    for line in cluster(env, "status").splitlines():
        fields = line.split()  # replica ID pid PID url URL healthy|down
        check(len(fields) == 7 and fields[6] == "healthy", f"status line: {line}")
        pids[fields[1]] = int(fields[3])

    work = queue.Queue()
    for i in range(REQUESTS):
        work.put({"model": "tiny", "prompt": [1 + i % 50, 2, 3, 4], "max_tokens": MAX_TOKENS,
                  "temperature": 0, "repetition_penalty": 1.3})
    results = []
    lock = threading.Lock()

    def client():
        while True:
            try:
                body = work.get_nowait()
            except queue.Empty:
                return
            result = stream(port, body)
            with lock:
                results.append(result)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    victim = "r2"
    while True:  # kill in the middle, while streams run on every replica
        with lock:
            done = len(results)
        if done >= REQUESTS // 3:
            break
        time.sleep(0.01)
    os.kill(pids[victim], signal.SIGKILL)
    print(f"killed {victim} (pid {pids[victim]}) after {done} responses")
    for thread in threads:
        thread.join()

    complete = [r for r in results if r[1] == "complete"]
    cut = [r for r in results if r[1] == "cut"]
    failed = [r for r in results if r[1] == "failed"]
    by_replica = {}
    for replica, outcome, *_ in results:
        by_replica.setdefault((replica, outcome), 0)
        by_replica[(replica, outcome)] += 1
    print(f"{len(results)} responses: {len(complete)} complete, {len(cut)} cut mid-stream, "
          f"{len(failed)} failed before streaming; by replica: {sorted(by_replica.items(), key=str)}")
    check(len(results) == REQUESTS, f"{len(results)} responses for {REQUESTS} requests")
    check(not failed, f"requests that never streamed yet failed: {failed[:3]}")
    for replica, _, tokens, usage, detail in cut:
        check(replica == victim, f"a stream from {replica} was cut: {detail}")
    for replica, _, tokens, usage, reason in complete:
        check(tokens == usage and (reason == "eos" or tokens == MAX_TOKENS),
              f"complete from {replica} ({reason}) with {tokens} token events, usage {usage}")
    check(any(r[0] == victim for r in complete), "the victim served nothing before the kill")
    survivors_after = [r for r in complete if r[0] != victim]
    check(len(survivors_after) > REQUESTS // 2, "the other replicas did not take over")

    # No duplicates: each completed response is one access-log line of the replica that sent it,
    # and no replica logged a completion the clients did not get. A replica writes the line after
    # the response's last bytes, so a survivor's last lines may land just after its client is
    # done (seen under load in CI: 148 logged, 149 received): poll a few seconds for them. The
    # killed replica may have sent a response's last bytes and died before its log line (SIGKILL
    # between the two, seen under ASan), so there a line may be missing, never one too many.
    def logged_completions(replica):
        with open(os.path.join(run_dir, f"{replica}.log"), errors="replace") as log:
            return sum(1 for line in log if "POST /v1/completions 200" in line)

    for replica in pids:
        received = by_replica.get((replica, "complete"), 0)
        if replica == victim:
            logged = logged_completions(replica)
            check(received - CLIENTS <= logged <= received,
                  f"{replica} (killed) logged {logged} completed requests, clients received "
                  f"{received}")
            continue
        deadline = time.time() + 10
        while (logged := logged_completions(replica)) < received and time.time() < deadline:
            time.sleep(0.1)
        check(logged == received,
              f"{replica} logged {logged} completed requests, clients received {received}")

    # The replica comes back and takes requests again.
    print(cluster(env, "restart", victim).strip())
    # The replica loads, then HAProxy's health check needs 2 passes 1 s apart: poll rather than
    # sleep a fixed time (a loaded sanitizer build takes longer).
    deadline = time.time() + 60
    while True:
        status = cluster(env, "status")
        if status.count(" healthy") == 3 or time.time() > deadline:
            break
        time.sleep(0.5)
    check(f"replica {victim} " in status and status.count(" healthy") == 3, status)
    served = set()
    deadline = time.time() + 60
    while time.time() < deadline:
        rejoin = []
        threads = [threading.Thread(target=lambda: rejoin.append(stream(
            port, {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 40,
                   "temperature": 0, "repetition_penalty": 1.3})))
                   for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        check(all(r[1] == "complete" for r in rejoin), f"after the restart: {rejoin[:2]}")
        served |= {r[0] for r in rejoin}
        if victim in served:
            break
    check(victim in served, f"the restarted replica got no request (served by {served})")

    pids = {line.split()[1]: int(line.split()[3]) for line in status.splitlines()}
    pids["haproxy"] = int(open(os.path.join(run_dir, "haproxy.pid")).read())
    cluster(env, "down")
    time.sleep(0.2)
    for name, pid in pids.items():
        try:
            os.kill(pid, 0)
            check(False, f"{name} (pid {pid}) still runs after down")
        except ProcessLookupError:
            pass
    if failures:
        print(f"{len(failures)} failures; logs in {run_dir}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
