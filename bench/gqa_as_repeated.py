"""Rewrites a .fir's grouped-query attentions (k and v with fewer heads than q) into the form
the exporter wrote before fusec's attention took them natively: q split as [.., Hkv, group, T,
d], k and v broadcast over the group, one attention over those, its results reshaped back. The
backward of that form computes dK and dV per query head and sums them afterwards. For
benchmarks only (scripts/gpu-gqa.sh compares the two forms of one exported model).

    python3 bench/gqa_as_repeated.py IN.fir OUT.fir
"""
import re
import sys

TYPE = re.compile(r"^\s*(%[\w.]+) = .* : (\w+)\[([\d,]*)\]")
ATT = re.compile(r"^(\s*)(%[\w.]+), (%[\w.]+) = attention\((%[\w.]+), (%[\w.]+), (%[\w.]+)\) (\{[^}]*\}) : (\w+)\[([\d,]*)\], f32\[([\d,]*)\]\s*$")


def dims(text):
    return [int(x) for x in text.split(",")] if text else []


def ty(dtype, shape):
    return f"{dtype}[{','.join(str(x) for x in shape)}]"


def main(src, dst):
    types, out, rewritten = {}, [], 0
    for line in open(src):
        m = ATT.match(line)
        if m:
            ind, o, lse, q, k, v, attrs, odt, oshape, lshape = m.groups()
            qdt, qs = types[q]
            kdt, ks = types[k]
            vdt, vs = types[v]
            if ks[:-2] != qs[:-2]:
                h, hkv = qs[-3], ks[-3]
                g = h // hkv
                lead = qs[:-3]
                q5 = lead + [hkv, g] + qs[-2:]
                out.append(f"{ind}{q}.g5 = reshape({q}) : {ty(qdt, q5)}\n")
                for x, xdt, xs in ((k, kdt, ks), (v, vdt, vs)):
                    out.append(f"{ind}{x}.g1 = reshape({x}) : {ty(xdt, lead + [hkv, 1] + xs[-2:])}\n")
                    out.append(f"{ind}{x}.g5 = broadcast({x}.g1) : {ty(xdt, lead + [hkv, g] + xs[-2:])}\n")
                o5 = lead + [hkv, g] + dims(oshape)[-2:]
                l5 = lead + [hkv, g] + dims(lshape)[-1:]
                out.append(f"{ind}{o}.g5, {lse}.g5 = attention({q}.g5, {k}.g5, {v}.g5) {attrs} : {ty(odt, o5)}, {ty('f32', l5)}\n")
                out.append(f"{ind}{o} = reshape({o}.g5) : {odt}[{oshape}]\n")
                out.append(f"{ind}{lse} = reshape({lse}.g5) : f32[{lshape}]\n")
                types[o], types[lse] = (odt, dims(oshape)), ("f32", dims(lshape))
                rewritten += 1
                continue
        t = TYPE.match(line)
        if t:
            types[t.group(1)] = (t.group(2), dims(t.group(3)))
        out.append(line)
    open(dst, "w").writelines(out)
    print(f"gqa_as_repeated: {rewritten} grouped attentions rewritten")
    return 0 if rewritten else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
