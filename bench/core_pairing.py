"""Which megatron-core release each shipped megatron-bridge release was built against (docs/versions.md).

For each Bridge wheel and each Core wheel (unpacked: a folder per wheel holding ``megatron/...``),
prints how many of the Bridge's ``megatron.core``/``megatron.training`` imports do not resolve in
that Core (unguarded ones break a module), and the Core dataclass fields the Bridge code names that
the next Core release added or removed. Nothing is imported (:mod:`mbmem_lint.dev.core_pairing`).

    python bench/core_pairing.py --wheels DIR [--bridge 0.4.2,0.5.1,0.6.2] [--core 0.16.1,0.17.0,...]

``DIR`` holds ``megatron_bridge-<v>/`` and ``megatron_core-<v>/`` folders (the wheels unpacked).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mbmem_lint.dev.core_pairing import CoreIndex, core_imports, unresolved  # noqa: E402
from mbmem_lint.resolve.schema_gen import generate_schema  # noqa: E402


def core_field_names(core_root: Path) -> set[str]:
    classes = generate_schema(core_root)["classes"]
    return {n for q, e in classes.items() if q.startswith(("megatron.core.", "megatron.training.")) for n in e["fields"]}


def bridge_names(bridge_root: Path) -> set[str]:
    names: set[str] = set()
    for p in (bridge_root / "megatron" / "bridge").rglob("*.py"):
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute):
                names.add(n.attr)
            elif isinstance(n, ast.keyword) and n.arg:
                names.add(n.arg)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", type=Path, required=True)
    ap.add_argument("--bridge", default="0.4.2,0.5.1,0.6.2")
    ap.add_argument("--core", default="0.16.1,0.17.0,0.17.1,0.18.0,0.18.2,0.19.0,0.19.2")
    args = ap.parse_args()
    cores = args.core.split(",")
    index = {c: CoreIndex(args.wheels / f"megatron_core-{c}") for c in cores}
    fields = {c: core_field_names(args.wheels / f"megatron_core-{c}") for c in cores}
    for b in args.bridge.split(","):
        root = args.wheels / f"megatron_bridge-{b}"
        imports = core_imports(root)
        names = bridge_names(root)
        print(f"megatron-bridge {b}: {len(imports)} imports of megatron.core/training names "
              f"({sum(not i.guarded for i in imports)} unguarded)")
        print(f"  {'core':8} {'unresolved':>10} {'unguarded':>9}  first unguarded")
        for c in cores:
            miss = unresolved(imports, index[c])
            hard = [i for i in miss if not i.guarded]
            first = "; ".join(sorted({f"{i.module}.{i.name}" for i in hard}))[:110]
            print(f"  {c:8} {len(miss):10d} {len(hard):9d}  {first}")
        print("  fields the Bridge code names, added / removed by the next Core release:")
        for c0, c1 in zip(cores, cores[1:]):
            added, removed = sorted((fields[c1] - fields[c0]) & names), sorted((fields[c0] - fields[c1]) & names)
            print(f"    {c0} -> {c1}: +{len(added)} {added[:6]}  -{len(removed)} {removed[:6]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
