#!/usr/bin/env python3
"""One line from an `nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,
temperature.gpu,clocks_event_reasons.active --format=csv -lms N` log: SM clock and power
over the busy samples (power above 200 W), and the share of them under a power cap
(reason bit 0x4, SW power cap; 0x80, HW power brake).

usage: smi_summary.py SMI.csv [--label TEXT]
"""
import argparse
import csv


def num(field):
    return float(field.strip().split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    rows = []
    for r in csv.reader(open(a.csv, errors="replace")):
        try:
            rows.append((num(r[1]), num(r[3]), int(r[5].strip(), 16)))
        except (IndexError, ValueError):
            continue  # header, or a line nvidia-smi cut short when it was stopped
    busy = [r for r in rows if r[1] > 200]
    if not busy:
        print(f"smi {a.label}: {len(rows)} samples, none above 200 W")
        return
    clk = sorted(r[0] for r in busy)
    pw = sorted(r[1] for r in busy)
    capped = sum(1 for r in busy if r[2] & 0x84)
    med = len(busy) // 2
    print(f"smi {a.label}: {len(busy)} busy samples of {len(rows)} (250 ms); SM clock median "
          f"{clk[med]:.0f} MHz (min {clk[0]:.0f}, max {clk[-1]:.0f}); power median {pw[med]:.0f} W "
          f"(max {pw[-1]:.0f}); {100 * capped / len(busy):.0f}% of busy samples at the power cap")


if __name__ == "__main__":
    main()
