#!/usr/bin/env python3
"""Write knob variants of the seed kernel.

  variants.py product OUTDIR      every allowed value of every knob: file i takes combination
                                  i (cycled) of each head dim's knob product
  variants.py named OUTDIR NAME=KNOB:VAL,KNOB:VAL ...   one file per NAME with those overrides
"""
import itertools
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "evokernel", "defaults", "attention_fa2.cu")
KNOB_RE = re.compile(r"^#define (\w+) (\S+)\s+// @knob (\S+)", re.M)


def knobs(src):
    return {m.group(1): (m.group(2), m.group(3).split(",")) for m in KNOB_RE.finditer(src)}


def setk(src, name, val):
    out, n = re.subn(r"^#define %s \S+(\s+// @knob)" % name, r"#define %s %s\1" % (name, val),
                     src, flags=re.M)
    assert n == 1, name
    return out


def main():
    mode, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    src = open(SRC).read()
    ks = knobs(src)
    if mode == "product":
        per = {}
        for hd in ("HD64", "HD128", "HD256"):
            names = [k for k in ks if k.endswith("_" + hd)]
            per[hd] = [dict(zip(names, v)) for v in itertools.product(*[ks[n][1] for n in names])]
        for i in range(max(len(v) for v in per.values())):
            s = src
            for combos in per.values():
                for k, v in combos[i % len(combos)].items():
                    s = setk(s, k, v)
            open(os.path.join(outdir, "p%02d.cu" % i), "w").write(s)
    else:
        for spec in sys.argv[3:]:
            name, kv = spec.split("=", 1)
            s = src
            for item in kv.split(","):
                k, v = item.split(":")
                assert v in ks[k][1], (k, v)
                s = setk(s, k, v)
            open(os.path.join(outdir, name + ".cu"), "w").write(s)


if __name__ == "__main__":
    main()
