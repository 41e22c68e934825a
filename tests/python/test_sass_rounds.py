"""scripts/gpu/sass_rounds.py reads a wgmma kernel's rounds from cuobjdump's SASS: the
length of each round and how many exponentials sit ahead of the P V wait. The SASS below
is cut down from attn_prefill_ws_hd128 (CUDA 13.0): one round where ptxas left the
exponentials after the wait, one where a store held the wait below them."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SASS = """\
\tcode for sm_90a
\t\tFunction : attn_prefill_ws_hd128
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0020*/                   FMNMX R4, R88, R89, !PT ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0040*/                   MUFU.EX2 R88, R88 ;
        /*0050*/                   MUFU.EX2 R89, R89 ;
        /*0060*/              @!P3 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ+0x58], RZ ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0080*/                   FMNMX R4, R88, R89, !PT ;
        /*0090*/                   MUFU.EX2 R88, R88 ;
        /*00a0*/                   MUFU.EX2 R89, R89 ;
        /*00b0*/                   STS [R206], R195 ;
        /*00c0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00d0*/                   EXIT ;
\t\tFunction : no_wgmma
        /*0000*/                   EXIT ;
"""


def test_rounds_and_exponentials_ahead_of_the_wait(tmp_path):
    f = tmp_path / "k.sass"
    f.write_text(SASS)
    out = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/sass_rounds.py"), str(f)],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "attn_prefill_ws_hd128: 14 instructions, 2 rounds with a Q K^T wait"
    # First round: 6 instructions to the next Q K^T wait, no exponential before the P V wait.
    assert "6 to the next round; MUFU.EX2 before the next wait:   0;" in lines[1]
    assert "MUFUx2" in lines[1]
    # Second round (the last): both exponentials ahead of the wait.
    assert "(last); MUFU.EX2 before the next wait:   2;" in lines[2]
    # A function without wgmma waits is not listed.
    assert "no_wgmma" not in out
