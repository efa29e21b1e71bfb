#!/usr/bin/env python3
"""Issue 14's slow-client case for as long as you like (the ServeLimits tests run it for seconds).

    scripts/slow_clients.py [SECONDS=90] [--infer build/infer] [--model tests/fixtures/models/llama/model]

Starts `infer serve` on a free port, opens 500 connections that send nothing and one that
trickles a header byte every 1.5 s, and asks /health once a second for SECONDS. Past about 63 s
the kernel stops holding the silent connections (TCP_DEFER_ACCEPT ends with its SYN-ACK
retries) and hands them all to the server at once; they must then wait parked, not on workers.
Prints each check and a summary; exits 1 if a check failed or took a second or more.
"""
import argparse
import re
import socket
import subprocess
import threading
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("seconds", nargs="?", type=int, default=90)
    parser.add_argument("--infer", default="build/infer")
    parser.add_argument("--model", default="tests/fixtures/models/llama/model")
    args = parser.parse_args()
    server = subprocess.Popen(
        [args.infer, "serve", "--model", args.model, "--served-model-name", "tiny",
         "--threads", "1", "--port", "0"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in server.stderr:
        match = re.search(r"listening on http://[0-9.]+:(\d+)", line)
        if match:
            port = int(match.group(1))
            break
    if port is None:
        raise SystemExit("infer serve did not start")
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()

    def health():
        start = time.time()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status = conn.recv(200).split(b"\r\n")[0].decode()
        return time.time() - start, status

    trickler = socket.create_connection(("127.0.0.1", port))

    def trickle():
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                trickler.send(bytes([byte]))
            except OSError as error:
                print(f"the trickling client was disconnected: {error}")
                return
            time.sleep(1.5)

    threading.Thread(target=trickle, daemon=True).start()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
    started = time.time()
    slowest, failed = 0.0, 0
    for _ in range(args.seconds):
        try:
            seconds, status = health()
        except OSError as error:
            seconds, status = 10.0, repr(error)
        ok = status == "HTTP/1.1 200 OK" and seconds < 1.0
        failed += 0 if ok else 1
        slowest = max(slowest, seconds)
        print(f"t={time.time() - started:5.1f} s  /health {status}  {seconds * 1000:.1f} ms")
        time.sleep(1)
    server.terminate()
    server.wait()
    for conn in idle:
        conn.close()
    print(f"{args.seconds} checks with 500 idle connections and a trickling client: "
          f"{args.seconds - failed} answered 200 within 1 s, slowest {slowest * 1000:.1f} ms")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
