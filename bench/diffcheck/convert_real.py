"""Convert each bundled config.json with the real megatron-bridge 0.6.2 and dump the provider it builds.

Runs in the Python 3.12 venv that holds megatron-bridge 0.6.2 + megatron-core 0.19.2 + transformers (started by
``bench/model_table_check.py``):

    python bench/diffcheck/convert_real.py --configs configs.json --out real.json

For every ``{id: {"config": {...}}}`` entry the config dict becomes the transformers config class of its
``model_type`` (``AutoConfig.for_model``; a plain ``PretrainedConfig`` when transformers has no class for it,
as for ``trust_remote_code`` models), ``AutoBridge.from_hf_config(config).to_megatron_provider(load_weights=False)``
builds the provider, and every dataclass field and extra attribute of the provider is dumped (JSON leaves;
objects as ``"<opaque ...>"``). Nothing is downloaded: ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stubs  # noqa: E402
from build_real import STUB_ROOTS, encode  # noqa: E402


def hf_config(data: dict[str, Any]) -> tuple[Any, str]:
    """(config object, how it was built)."""
    import transformers

    if not data.get("model_type") or data.get("auto_map"):
        # trust_remote_code classes are not installed: sub-configs become config objects as their classes would
        data = {k: (hf_config(v)[0] if k.endswith("_config") and isinstance(v, dict) else v) for k, v in data.items()}
    model_type = data.get("model_type")
    kwargs = {k: v for k, v in data.items() if k != "model_type"}
    try:
        cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
        how = f"transformers {type(cfg).__name__}"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        cfg = transformers.PretrainedConfig(**data)
        how = f"PretrainedConfig ({type(exc).__name__}: {str(exc)[:120]})"
    # transformers 5 renamed torch_dtype to dtype; Bridge 0.6.2's dtype_from_hf asserts the old name.
    for c in [cfg, *(getattr(cfg, k) for k in vars(cfg) if k.endswith("_config"))]:
        if c is not None and not isinstance(c, dict) and not hasattr(c, "torch_dtype"):
            c.torch_dtype = getattr(c, "dtype", None)
    return cfg, how


def provider_values(provider: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    names = [f.name for f in dataclasses.fields(provider)] if dataclasses.is_dataclass(provider) else []
    for name in names + sorted(k for k in vars(provider) if k not in names and not k.startswith("_")):
        try:
            out[name] = encode(getattr(provider, name))
        except Exception as exc:  # noqa: BLE001
            out[name] = f"<error {type(exc).__name__}>"
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    entries = json.loads(Path(args.configs).read_text())
    finder = stubs.install(STUB_ROOTS)
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    result: dict[str, Any] = {"providers": {}, "errors": {}, "config_classes": {}}
    for hf_id, entry in sorted(entries.items()):
        try:
            cfg, how = hf_config(entry["config"])
            result["config_classes"][hf_id] = how
            bridge = AutoBridge.from_hf_config(cfg)
            provider = bridge.to_megatron_provider(load_weights=False)
            result["providers"][hf_id] = {"class": f"{type(provider).__module__}.{type(provider).__qualname__}",
                                         "values": provider_values(provider)}
        except BaseException as exc:  # noqa: BLE001
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            result["errors"][hf_id] = f"{type(exc).__name__}: {exc} ({tb.filename.split('site-packages/')[-1]}:{tb.lineno})"[:600]
    result["stubbed_modules"] = sorted(finder.used)
    Path(args.out).write_text(json.dumps(result))
    print(f"converted {len(result['providers'])}, errors {len(result['errors'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
