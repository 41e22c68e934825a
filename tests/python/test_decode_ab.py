"""scripts/gpu/decode_ab.py: medians per build from gpu-check's decode-kernel lines, and
the ratio B / A per (shape, group, kernel), on lines in the bench's own format."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("decode_ab", ROOT / "scripts/gpu/decode_ab.py")
decode_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_ab)


def line(shape, q, group, fill_ms, sk_ms):
    return (f"bench: decode kernels, {shape}, {q}q/8kv x 128 (group {group}): "
            f"Decode 0.3110 ms = 3.71 TB/s (87% of copy); "
            f"DecodeMma/waves {fill_ms:.4f} ms = 4.10 TB/s (97% of copy); "
            f"DecodeMma/fill {fill_ms:.4f} ms = 4.10 TB/s (97% of copy); "
            f"DecodeMma/2 splits 0.3000 ms = 3.90 TB/s (92% of copy); "
            f"DecodeMmaSk {sk_ms:.4f} ms = 3.95 TB/s (93% of copy);\n")


def write(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text("device rates: copy 4.24 TB/s\n" + "".join(rows))
    return str(p)


def test_medians_and_ratios(tmp_path, capsys):
    a = [write(tmp_path, f"a{i}.log", [line("batch 256 x ctx 256", 40, 5, t, 0.09)])
         for i, t in enumerate([0.070, 0.072, 0.090])]
    b = [write(tmp_path, f"b{i}.log", [line("batch 256 x ctx 256", 40, 5, t, 0.09)])
         for i, t in enumerate([0.080, 0.079, 0.081])]
    assert decode_ab.main(["--a", *a, "--b", *b, "--names", "lean,old",
                           "--kernels", "DecodeMma/fill,DecodeMmaSk"]) == 0
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.startswith("| batch 256")]
    assert len(rows) == 2
    # Median of A 0.072 (the 0.090 outlier does not move it), of B 0.080.
    fill = next(r for r in rows if "DecodeMma/fill" in r)
    assert "0.072" in fill and "0.080" in fill and fill.endswith("| 1.111 |")
    sk = next(r for r in rows if "DecodeMmaSk" in r)
    assert sk.endswith("| 1.000 |")


def test_no_common_lines_is_an_error(tmp_path):
    a = [write(tmp_path, "a.log", [line("batch 8 x ctx 16384", 16, 2, 0.14, 0.15)])]
    b = [write(tmp_path, "b.log", ["nothing here\n"])]
    assert decode_ab.main(["--a", *a, "--b", *b]) == 1
