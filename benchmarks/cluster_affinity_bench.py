#!/usr/bin/env python3
"""Prefix affinity against leastconn behind HAProxy (issue 15), in one run: bench_serving's
prefix workload (16 requests at once, each a 768-token shared prefix + 32 own tokens,
max_tokens 64) spread over 4 sessions (each session its own prefix, 4 requests each, the
session in X-Session-Id), on real-size random Llama-3.2-1B weights:

  single     1 replica x 2 threads (everything in one prefix cache)
  leastconn  2 replicas x 1 thread, HAProxy leastconn
  affinity   2 replicas x 1 thread, HAProxy hashing X-Session-Id

Reports per mode the prefix-cache hit rate (the replicas' vllm:prefix_cache_hits_total /
queries_total) and TTFT P50/P90 seen by the clients; writes
benchmarks/reports/cluster_affinity-<stamp>.json.

Usage: benchmarks/cluster_affinity_bench.py [--model models/Llama-3.2-1B-Instruct]
"""
import argparse
import datetime
import http.client
import json
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")


def cluster(env, *args):
    return subprocess.run([CLUSTER, *args], env=env, capture_output=True, text=True, check=True,
                          timeout=900).stdout


def ttft(port, prompt, session, max_tokens):
    """Seconds to the first token event, and the replica that answered."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    start = time.perf_counter()
    connection.request("POST", "/v1/completions",
                       body=json.dumps({"model": "bench", "prompt": prompt,
                                        "max_tokens": max_tokens, "temperature": 0}),
                       headers={"Content-Type": "application/json", "X-Session-Id": session})
    response = connection.getresponse()
    assert response.status == 200, response.read()
    first = None
    for line in response:
        if line.startswith(b"event: token") and first is None:
            first = time.perf_counter() - start
        if line.startswith(b"event: done") or line.startswith(b"event: error"):
            break
    replica = response.getheader("X-Replica-Id")
    connection.close()
    return first, replica


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    line = next(l for l in text.splitlines() if l.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.join(ROOT, "models/Llama-3.2-1B-Instruct"))
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--shared", type=int, default=768)
    parser.add_argument("--own", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--modes", default="single,leastconn,affinity")
    args = parser.parse_args()
    rng = random.Random(0)
    prefixes = [[rng.randrange(1000, 100000) for _ in range(args.shared)]
                for _ in range(args.sessions)]
    work = []
    for i in range(args.requests):
        session = i % args.sessions
        own = [rng.randrange(1000, 100000) for _ in range(args.own)]
        work.append((f"session-{session + 1}", prefixes[session] + own))
    modes = [("single", 1, 2, "leastconn"), ("leastconn", 2, 1, "leastconn"),
             ("affinity", 2, 1, "affinity")]
    modes = [m for m in modes if m[0] in args.modes.split(",")]
    results = []
    for name, replicas, threads, balance in modes:
        run_dir = tempfile.mkdtemp(prefix=f"infer-affinity-{name}-")
        env = dict(os.environ, INFER_CLUSTER_DIR=run_dir)
        try:
            url = cluster(env, "up", str(replicas), "--balance", balance, "--model", args.model,
                          "--load-format", "dummy", "--threads", str(threads),
                          "--served-model-name", "bench", "--kv-cache-memory", "2GiB",
                          "--max-model-len", "2048").strip().splitlines()[-1]
            port = int(url.rsplit(":", 1)[1])
            replica_urls = [line.split()[5] for line in cluster(env, "status").splitlines()]
            outcomes = [None] * len(work)

            def client(i):
                outcomes[i] = ttft(port, work[i][1], work[i][0], args.max_tokens)

            start = time.perf_counter()
            threads_ = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
            for thread in threads_:
                thread.start()
            for thread in threads_:
                thread.join()
            wall = time.perf_counter() - start
            hits = sum(metric(u, "vllm:prefix_cache_hits_total") for u in replica_urls)
            queries = sum(metric(u, "vllm:prefix_cache_queries_total") for u in replica_urls)
            ttfts = sorted(o[0] for o in outcomes)
            split = {}
            for (session, _), (_, replica) in zip(work, outcomes):
                split.setdefault(replica, set()).add(session)
            row = {"mode": name, "replicas": replicas, "threads_per_replica": threads,
                   "balance": balance, "prefix_cache_hit_rate": hits / queries,
                   "ttft_p50_s": statistics.median(ttfts),
                   "ttft_p90_s": ttfts[int(0.9 * (len(ttfts) - 1))], "wall_s": wall,
                   "sessions_by_replica": {r: sorted(s) for r, s in split.items()}}
            results.append(row)
            print(f"{name:9s} hit rate {row['prefix_cache_hit_rate']:.3f}  TTFT P50 "
                  f"{row['ttft_p50_s']:.2f} s  P90 {row['ttft_p90_s']:.2f} s  wall {wall:.1f} s  "
                  f"sessions {row['sessions_by_replica']}", flush=True)
        finally:
            subprocess.run([CLUSTER, "down"], env=env, capture_output=True, timeout=300)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((l.split(":", 1)[1].strip() for l in cpu.splitlines()
                       if l.startswith("Model name")), "?")
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    report = os.path.join(ROOT, "benchmarks", "reports", f"cluster_affinity-{stamp}.json")
    with open(report, "w") as out:
        json.dump({"cpu": model_name, "model": os.path.basename(args.model), "workload": {
            "sessions": args.sessions, "requests": args.requests, "shared": args.shared,
            "own": args.own, "max_tokens": args.max_tokens}, "modes": results}, out, indent=1)
    print("report:", report)


if __name__ == "__main__":
    main()
