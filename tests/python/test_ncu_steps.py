"""scripts/gpu/ncu_steps.py on a CSV shaped as `ncu --csv --page raw` writes it.

The steps are cut at each embedding_gather and the per-kernel table sums durations; the
--extra columns are the mean of each metric over a kernel's launches, and a metric that
was asked for but not collected stops the script with its name."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/gpu/ncu_steps.py"

HEAD = ["ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum", "dram__bytes_read.sum"]
UNITS = ["", "", "", "usecond", "Mbyte"]


def write_csv(path, launches):
    lines = ["==PROF== Connected to process 1", ",".join(f'"{h}"' for h in HEAD),
             ",".join(f'"{u}"' for u in UNITS)]
    for i, (name, grid, us, mb) in enumerate(launches):
        lines.append(f'"{i}","{name}","{grid}","{us}","{mb}"')
    path.write_text("\n".join(lines) + "\n")


def run(path, *args):
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *args],
                          capture_output=True, text=True)


def test_extra_metric_is_a_mean_per_kernel(tmp_path):
    csv_path = tmp_path / "ncu.csv"
    step = [("embedding_gather", "(1, 1, 1)", 2.0, 0.1),
            ("nvjet_tst_64x32", "(128, 1, 1)", 10.0, 6.0),
            ("nvjet_tst_64x32", "(128, 1, 1)", 8.0, 4.0),
            ("attn_decode_mma_hd128", "(1, 8, 256)", 100.0, 270.0)]
    write_csv(csv_path, step + step)
    r = run(csv_path, "--tables", "1", "--labels", "b256", "--extra", "dram__bytes_read.sum")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "8 kernels in 2 steps" in out
    assert "### b256: 4 launches, 120.0 µs of kernel time" in out
    assert "dram__bytes_read.sum (Mbyte)" in out
    nvjet = next(line for line in out.splitlines() if line.startswith("| nvjet_tst_64x32"))
    cells = [c.strip() for c in nvjet.strip("|").split("|")]
    # calls, µs each, total, share, then the mean of 6.0 and 4.0
    assert cells[2:] == ["2", "9.00", "18.0", "15.0%", "5"]


def test_a_metric_not_collected_is_named(tmp_path):
    csv_path = tmp_path / "ncu.csv"
    write_csv(csv_path, [("embedding_gather", "(1, 1, 1)", 2.0, 0.1)])
    r = run(csv_path, "--extra", "lts__t_bytes.sum")
    assert r.returncode != 0
    assert "lts__t_bytes.sum" in r.stderr
