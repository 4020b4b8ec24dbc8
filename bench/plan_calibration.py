"""Fit the plan cost model's constants on the measured step times (tests/plan_cases.py) and print the fit.

    .venv/bin/python bench/plan_calibration.py [--write]

Fitted: GEMM efficiency, TP collective exposure and the share of a block's GEMM time its collectives hide
under (TP overlap) on the four Llama3-70B measurements plus the baseline's absolute step time (704
TFLOP/s/GPU), then the LoRA re-gather exposure on the Qwen3-8B run. ``--write`` stores the result in mbmem_lint/data/interconnect.json. Out-of-sample rows
(not fitted) are printed for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from plan_cases import CASES, llama_measured_step_s, llama_modelled_step_s, modelled  # noqa: E402

from mbmem_lint.plan.hardware import Calibration, calibration  # noqa: E402


def nelder_mead(f: Callable[[list[float]], float], x0: list[float], step: float = 0.2, iters: int = 600) -> list[float]:
    """Minimise ``f`` over log-parameters (plain Nelder-Mead; the fit has three unknowns)."""
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (step if j == i else 0.0) for j in range(n)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        refl = [centroid[j] + (centroid[j] - pts[-1][j]) for j in range(n)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [centroid[j] + 2 * (centroid[j] - pts[-1][j]) for j in range(n)]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [centroid[j] + 0.5 * (pts[-1][j] - centroid[j]) for j in range(n)]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0]] + [[pts[0][j] + 0.5 * (p[j] - pts[0][j]) for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[min(range(n + 1), key=lambda i: vals[i])]


def fit() -> Calibration:
    base = calibration()
    llama = [c for c in CASES if c.fitted and c.name.startswith("llama")]
    target_step = llama_measured_step_s()

    def make(x: list[float]) -> Calibration:
        return dataclasses.replace(base, gemm_efficiency=math.exp(x[0]), tp_exposure=math.exp(x[1]),
                                   tp_hidden=math.exp(x[2]))

    def loss(x: list[float]) -> float:
        cal = make(x)
        err = sum(math.log(modelled(c, cal) / c.measured) ** 2 for c in llama)
        return err + 0.25 * math.log(llama_modelled_step_s(cal) / target_step) ** 2

    x = nelder_mead(loss, [math.log(base.gemm_efficiency), math.log(base.tp_exposure), math.log(max(0.05, base.tp_hidden))])
    cal = make(x)
    rg = [c for c in CASES if c.fitted and "re-gather" in c.name][0]
    lo, hi = 0.0, 20.0
    for _ in range(60):  # bisection: the re-gather term is linear in its exposure
        mid = (lo + hi) / 2
        if modelled(rg, dataclasses.replace(cal, regather_exposure=mid)) < rg.measured:
            lo = mid
        else:
            hi = mid
    return dataclasses.replace(cal, regather_exposure=round((lo + hi) / 2, 3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="store the fitted constants in interconnect.json")
    args = ap.parse_args(argv)
    cal = fit()
    cal = dataclasses.replace(cal, gemm_efficiency=round(cal.gemm_efficiency, 4),
                              tp_exposure=round(cal.tp_exposure, 3), tp_hidden=round(cal.tp_hidden, 3))
    print(f"gemm_efficiency {cal.gemm_efficiency}  tp_exposure {cal.tp_exposure}  tp_hidden {cal.tp_hidden}  "
          f"regather_exposure {cal.regather_exposure}")
    print(f"llama3-70b baseline step: measured {llama_measured_step_s():.3f} s (704 TFLOP/s/GPU), "
          f"modelled {llama_modelled_step_s(cal):.3f} s")
    print(f"{'case':<44} {'measured':>9} {'modelled':>9}  fitted")
    for c in CASES:
        print(f"{c.name:<44} {c.measured:>9.4f} {modelled(c, cal):>9.4f}  {'yes' if c.fitted else 'no'}")
    if args.write:
        path = ROOT / "mbmem_lint" / "data" / "interconnect.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in ("gemm_efficiency", "tp_exposure", "tp_hidden", "regather_exposure"):
            data["calibration"][key] = getattr(cal, key)
        text = path.read_text(encoding="utf-8")
        start = text.index('  "calibration"')
        block = json.dumps({"calibration": data["calibration"]}, indent=2)[2:-2]
        path.write_text(text[:start] + block + "\n}\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
