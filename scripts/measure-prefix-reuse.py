#!/usr/bin/env python3
"""Issue 57's two numbers of prompts reused, against a running `hotcold serve --http 127.0.0.1:PORT`
(docs/performance.md, "Prompts reused"). Prompts are token ids (/v1/completions), fresh random ones
each run so that nothing an earlier run left is found.

  turns PORT   time to first token of a 1,550-token turn whose first 1,500 tokens a turn before
               computed, against a fresh 50-token prompt and against the same turn with
               cache_prompt false (three conversations)
  shared PORT  8 clients at once, each a 1,000-token system prompt and 50 tokens of its own: the
               server's counters of prompt tokens computed and reused
"""
import json, random, sys, threading, time, urllib.request

port, mode = int(sys.argv[2]), sys.argv[1]
base = f"http://127.0.0.1:{port}"
model = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
rnd = random.Random(time.time())


def tokens(n):
    return [rnd.randrange(10, 30000) for _ in range(n)]


def post(body):
    """Seconds to the first streamed chunk (stream) or to the whole answer."""
    body = dict(body, model=model, temperature=0)
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=900) as r:
        if not body.get("stream"):
            r.read()
            return time.time() - t0
        for line in r:
            if line.startswith(b"data: ") and b"choices" in line:
                return time.time() - t0
    return time.time() - t0


def counters():
    out = {}
    for line in urllib.request.urlopen(base + "/metrics").read().decode().splitlines():
        if line.startswith("hotcold_prompt_tokens"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


if mode == "turns":
    for _ in range(3):
        fresh = post({"prompt": tokens(50), "max_tokens": 1, "stream": True})
        history = tokens(1500)
        post({"prompt": history, "max_tokens": 8})  # the turn before (untimed)
        turn = history + tokens(50)
        reused = post({"prompt": turn, "max_tokens": 1, "stream": True})
        whole = post({"prompt": turn, "max_tokens": 1, "stream": True, "cache_prompt": False})
        print(f"fresh 50-token prompt {fresh * 1000:.0f} ms; {len(turn)}-token turn, 50 new: {reused * 1000:.0f} ms "
              f"({reused / fresh:.2f}x the fresh prompt); the same turn computed whole {whole * 1000:.0f} ms")
elif mode == "shared":
    system = tokens(1000)
    before = counters()
    clients = [threading.Thread(target=post, args=({"prompt": system + tokens(50), "max_tokens": 4},)) for _ in range(8)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    after = counters()
    print({k: after[k] - before.get(k, 0) for k in after})
else:
    sys.exit(__doc__)
