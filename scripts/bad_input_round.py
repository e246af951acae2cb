#!/usr/bin/env python3
"""A bad-input round over sinklab's command line: every value-taking option of every subcommand,
given hostile values on top of a base invocation that succeeds, run as a careless or hostile user
would, each under a time limit and an address-space limit.

Usage: python3 scripts/bad_input_round.py [--bin target/release/sinklab] [--out round.jsonl]
                                          [--timeout 30] [--mem-gb 4] [--only SUBCOMMAND]

The options are read from `sinklab <cmd> -h`, so options added later are covered without editing
this file. Each case is classified:
  ok        exit 0
  refused   exit 1 or 2 with a message and no panic
  PANIC     "panicked" on stderr or exit 101
  SIGNAL    killed by a signal (an allocation abort, a stack overflow, a crash)
  HANG      still running at the time limit
  NO-MESSAGE  a non-zero exit with an empty stderr
Findings (the upper-case classes) are printed with their command; every case goes to --out as one
JSON line. A case classed `ok` can still be a wrong answer: the round finds crashes, hangs,
memory blow-ups and silent exits, and the tests own the answers. Needs SmolLM2 in the cache for
the model-backed subcommands (SINKLAB_CACHE); stdlib only.
"""
import argparse, json, os, re, resource, shlex, struct, subprocess, sys, tempfile, time

HOSTILE_NUMBERS = ["0", "-1", "18446744073709551616", "1e308", "nan", "inf", "", "1,2", "0x10", "  7"]
HOSTILE_PATHS = ["/nonexistent/x", "/dev/zero", "/dev/null", "{dir}", "{fifo}", "{input}",
                 "{dir}/out`<img src=x onerror=alert(1)>`", "{dir}/a\nb"]
HOSTILE_TEXT = ["", "\x1b[31mred", "<script>alert(1)</script>", "x" * 100000, "\u202eabc",
                "-1", "1,1,1", "99999999999"]


def write_safetensors(path, tensors):
    """Minimal safetensors writer: float32 tensors from nested lists (stdlib only)."""
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def options(binary, cmd):
    """(long option, value name or None) of `sinklab cmd -h`."""
    out = subprocess.run([binary, cmd, "-h"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s+(?:-\w, )?(--[\w-]+)(?: <([^>]+)>)?", line)
        if m and m.group(1) not in ("--help", "--version"):
            found.append((m.group(1), m.group(2)))
    return found


def bases(d, fixtures):
    """A base invocation per subcommand that succeeds quickly."""
    return {
        "check": ["check", "hard_switch", "--cases", "3"],
        "backend": ["backend", "--backend", "cpu", "--steps", "5", "--t", "8", "--batch", "2"],
        "cost": ["cost", "--pattern", "sink", "--norm", "fro", "--t", "8", "--delta", "1"],
        "half-space": ["half-space", "--file", fixtures["instance"]],
        "sweep": ["sweep", fixtures["spec"], "--out", f"{d}/sweep", "--threads", "1"],
        "train": ["train", "--t", "8", "--d", "8", "--r", "8", "--steps", "20"],
        "real": ["real", "--model", "smollm2", "--text", "The cat sat on the mat."],
        "secondary": ["secondary", "--activations", fixtures["acts"]],
        "synth": ["synth", "--shape", "tiny-llama3", "--out", f"{d}/t.gguf"],
        "view": ["view", "--model", "smollm2", "--text", "The cat sat.", "--out", f"{d}/p.html"],
    }


def classify(rc, err, hung):
    if hung:
        return "HANG"
    if "panicked" in err or rc == 101:
        return "PANIC"
    if rc < 0:
        return "SIGNAL"
    if rc == 0:
        return "ok"
    return "refused" if err.strip() else "NO-MESSAGE"


def run(binary, args, timeout, mem_gb):
    def limit():
        b = int(mem_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
        os.nice(5)
    t = time.time()
    try:
        p = subprocess.run([binary] + args, capture_output=True, timeout=timeout,
                           preexec_fn=limit, stdin=subprocess.DEVNULL)
        rc, err, hung = p.returncode, p.stderr.decode("utf8", "replace"), False
    except subprocess.TimeoutExpired as e:
        rc, err, hung = None, (e.stderr or b"").decode("utf8", "replace"), True
    return rc, err, hung, time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/sinklab")
    ap.add_argument("--out", default="bad_input_round.jsonl")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--mem-gb", type=float, default=4)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sinklab-round-")
    fifo = f"{d}/fifo"
    os.mkfifo(fifo)
    inst = f"{d}/inst.safetensors"
    write_safetensors(inst, {"queries": ([3, 2], [1, 0, 0, 1, 1, 1]),
                             "keys": ([2, 2], [1, 0, 0, 1]), "sink": ([2], [1, 1])})
    acts = f"{d}/acts.safetensors"
    subprocess.run([a.bin, "real", "--model", "smollm2", "--text", "The cat sat on the mat.",
                    "--dump", acts, "--what", "hidden"], capture_output=True)
    spec = f"{d}/tiny.toml"
    with open(spec, "w") as f:
        f.write('name = "tiny"\nbootstrap = 50\n\n[[exact]]\npatterns = ["sink"]\n'
                'norms = ["fro"]\nembeddings = ["orthonormal"]\nt = [4, 8]\nseeds = [0]\n')
    fixtures = {"instance": inst, "acts": acts, "spec": spec}
    cases = []
    for cmd, base in bases(d, fixtures).items():
        if a.only and cmd != a.only:
            continue
        input_path = next((x for x in base if x.startswith(d) and os.path.exists(x)), spec)
        for opt, value in options(a.bin, cmd):
            if value is None:
                cases.append((cmd, base + [opt]))
                continue
            pathy = any(k in value for k in ("FILE", "DIR", "PATH"))
            texty = value in ("TEXT", "TOKEN", "MODELS", "LIST", "IDS", "L.H,...")
            vals = HOSTILE_PATHS if pathy else HOSTILE_TEXT if texty else HOSTILE_NUMBERS
            for v in vals:
                v = v.format(dir=d, fifo=fifo, input=input_path)
                # The option replaces its value in the base invocation, or is appended.
                args = list(base)
                if opt in args:
                    i = args.index(opt)
                    args[i + 1] = v
                else:
                    args += [opt, v]
                cases.append((cmd, args))
    findings = 0
    with open(a.out, "w") as out:
        for k, (cmd, args) in enumerate(cases):
            rc, err, hung, secs = run(a.bin, args, a.timeout, a.mem_gb)
            c = classify(rc if rc is not None else 0, err, hung)
            rec = {"cmd": cmd, "args": args, "class": c, "rc": rc, "seconds": round(secs, 2),
                   "stderr_tail": err[-400:]}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            if c.isupper():
                findings += 1
                print(f"{c:<10} {secs:6.1f}s  sinklab {shlex.join(args)[:300]}\n    {err.strip()[-300:]}",
                      flush=True)
            print(f"[{k + 1}/{len(cases)}] {c}", file=sys.stderr, flush=True)
    counts = {}
    for line in open(a.out):
        r = json.loads(line)
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    print(json.dumps({"cases": len(cases), "classes": counts, "findings": findings}))


if __name__ == "__main__":
    main()
