"""The rewrites Megatron Bridge applies to a config before training, in Bridge's order.

Sources (megatron-bridge 0.6.2):

1. ``scripts/training/run_recipe.py``: ``ddp.nccl_ub`` forces ``NCCL_NVLS_ENABLE=1`` and
   ``NCCL_CTA_POLICY=1``; ``model.seq_length := dataset.seq_length``.
2. ``training/config.py:1853 runtime_config_update``: env vars applied with ``setdefault`` (the
   launcher's environment wins; the recipe's values are what we know);
3. mixed precision: a preset name is resolved, ``finalize()`` then ``setup()`` overwrites every
   same-named field of model, optimizer and ddp (``training/mixed_precision.py:138``);
4. comm overlap ``setup()`` (``training/comm_overlap.py:604``) copies its fields onto the model and,
   with the distributed optimizer, onto optimizer/ddp; TP overlap is dropped at TP<2 or without SP;
5. ``validate()``: model finalize (SP dropped at TP=1, derived defaults), distributed-optimizer and
   ``overlap_param_gather`` OR-sync (``training/config.py:1945``), NullTokenizer vocabulary
   (``training/setup.py:681``).

Every rewritten value records origin ``runtime`` and the reason. Megatron Bridge 0.4 and 0.5 apply the
same steps 3-5 (their ``training/config.py`` and ``setup.py``); steps 1-2 act on fields that are new in
0.6 (``env_vars``, ``dataset.seq_length``) and so do nothing against older data.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.resolve.flatten import to_json
from mbmem_lint.resolve.interpreter import Interpreter
from mbmem_lint.resolve.project import mixed_precision_preset
from mbmem_lint.resolve.resolved import PLAIN_TYPES, Rewrite, Unknown
from mbmem_lint.resolve.values import DictVal, Ext, Obj, Prov, Slot, WriteRec

COMM_OVERLAP_FIELDS = (
    "tp_comm_overlap", "tp_comm_overlap_cfg", "tp_comm_bootstrap_backend", "overlap_p2p_comm",
    "batch_p2p_comm", "overlap_grad_reduce", "overlap_param_gather",
    "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size",
    "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_moe_expert_parallel_comm",
    "delay_wgrad_compute",
)
COMM_OVERLAP_MODEL_FIELDS = (
    "tp_comm_overlap", "tp_comm_overlap_cfg", "tp_comm_bootstrap_backend", "overlap_p2p_comm",
    "batch_p2p_comm", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
    "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
)
COMM_OVERLAP_DP_FIELDS = (
    "bucket_size", "overlap_grad_reduce", "overlap_param_gather",
    "overlap_param_gather_with_optimizer_step", "align_param_gather",
)


MIXED_PRECISION_CLASS = "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"
_PRECISION_FALLBACK_FIELDS = ("params_dtype", "pipeline_dtype", "autocast_dtype", "bf16", "fp16",
                              "grad_reduce_in_fp32", "fp8", "fp8_recipe", "fp8_param", "fp8_param_gather",
                              "fp4", "fp4_param", "fp4_param_gather")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class RuntimeRewriter:
    def __init__(self, interp: Interpreter, root: Obj, world_size: int | None, fallback: Location) -> None:
        self.interp = interp
        self.root = root
        self.world_size = world_size
        self.fallback = fallback
        self.rewrites: list[Rewrite] = []
        self._objs: dict[str, Obj] = {}  # section objects; invalidated when a section is replaced

    def pre_runtime(self) -> dict[str, Any]:
        """The value before the rewrites, for every path a rewrite changed."""
        out: dict[str, Any] = {}
        for rw in self.rewrites:
            out.setdefault(rw.path, rw.old)
        return out

    # -- access ------------------------------------------------------------------------------
    def obj(self, path: str) -> Obj | None:
        hit = self._objs.get(path)
        if hit is not None:
            return hit
        found = self._find_obj(path)
        if found is not None:
            self._objs[path] = found
        return found

    def _find_obj(self, path: str) -> Obj | None:
        cur: Any = self.root
        for part in path.split(".") if path else []:
            if not isinstance(cur, Obj):
                return None
            slot = self.interp.get_slot(cur, part)
            cur = slot.value if slot is not None else None
        return cur if isinstance(cur, Obj) else None

    def get(self, path: str) -> Any:
        prefix, _, name = path.rpartition(".")
        o = self.obj(prefix)
        if o is None:
            return Unknown(f"{prefix or 'config'} is not a config object")
        slot = self.interp.get_slot(o, name)
        return slot.value if slot is not None else Unknown(f"{path} is not a field")

    def anchor(self, path: str) -> Location:
        prefix, _, name = path.rpartition(".")
        o = self.obj(prefix)
        if o is not None:
            slot = self.interp.get_slot(o, name)
            if slot is not None:
                return slot.prov.anchor
        return self.fallback

    def set(self, path: str, value: Any, reason: str, causes: list[str]) -> None:
        prefix, _, name = path.rpartition(".")
        o = self.obj(prefix)
        if o is None:
            return
        old = self.get(path)
        if _same(old, value):
            return
        anchor = self.anchor(causes[0]) if causes else self.fallback
        self._write(o, name, path, old, value, anchor, reason, causes)

    def _write(self, o: Obj, name: str, path: str, old: Any, value: Any, anchor: Location, reason: str,
               causes: list[str]) -> None:
        """Record one rewrite of ``o.name`` (``path``) whose current value ``old`` differs from ``value``."""
        if isinstance(value, Obj) or isinstance(old, Obj):
            self._objs.clear()
        prov = Prov(anchor, anchor, "runtime", self.interp.next_seq(), None, None, None, note=reason)
        table = o.slots if (o.schema is None or name in o.schema.fields or name in o.slots) else o.invalid
        slot = table.get(name)
        rec = WriteRec(value, prov, True)
        table[name] = Slot(value, prov, (rec,) if slot is None else slot.history + (rec,))  # replaced: clones share slots
        self.rewrites.append(Rewrite(path, _plain(old), _plain(value), reason, list(causes)))

    def has_field(self, section: str, name: str) -> bool:
        o = self.obj(section)
        return o is not None and (o.schema is None or name in o.schema.fields or name in o.slots)

    # -- the rewrites, in order ---------------------------------------------------------------
    def run(self) -> None:
        self.runner_env()
        self.runner_seq_length()
        self.mixed_precision()
        self.comm_overlap()
        self.model_finalize()
        self.distributed_optimizer_sync()
        self.tokenizer_vocab()
        self.deprecated_eval_fields()

    def runner_env(self) -> None:
        if self.get("ddp.nccl_ub") is not True:
            return
        env = self.get("env_vars")
        if not isinstance(env, DictVal):
            return
        for key in ("NCCL_NVLS_ENABLE", "NCCL_CTA_POLICY"):
            old = env.slots.get(key)
            if old is not None and str(old.value) == "1":
                continue
            anchor = self.anchor("ddp.nccl_ub")
            reason = f"ddp.nccl_ub=True makes run_recipe.py set {key}=1 (scripts/training/run_recipe.py)"
            prov = Prov(anchor, anchor, "runtime", self.interp.next_seq(), note=reason)
            env.slots[key] = Slot(1, prov, (WriteRec(1, prov, True),))
            self.rewrites.append(Rewrite(f"env_vars.{key}", old.value if old else None, 1, reason, ["ddp.nccl_ub"]))

    def runner_seq_length(self) -> None:
        ds = self.get("dataset.seq_length")
        if _is_int(ds):
            self.set("model.seq_length", ds,
                     "run_recipe.py sync_model_dataset_sequence_length sets model.seq_length := dataset.seq_length",
                     ["dataset.seq_length"])

    def mixed_precision(self) -> None:
        mp = self.get("mixed_precision")
        if mp is None:
            return
        if isinstance(mp, str):
            preset = mixed_precision_preset(self.interp, mp, None)
            if not isinstance(preset, Obj):
                for section in ("model", "optimizer", "ddp"):
                    self._havoc_precision(section, f"mixed-precision preset {mp!r} is not known")
                return
            self.set("mixed_precision", preset, f"preset {mp!r} resolved from MIXED_PRECISION_RECIPES",
                     ["mixed_precision"])
            mp = preset
        if isinstance(mp, Unknown):
            for section in ("model", "optimizer", "ddp"):
                self._havoc_precision(section, f"cfg.mixed_precision is not known ({mp.reason})")
            return
        if not isinstance(mp, Obj):
            return
        # finalize(): fp8_param / fp4_param default to the *_param_gather flags.
        for p, g in (("fp8_param", "fp8_param_gather"), ("fp4_param", "fp4_param_gather")):
            if self.get(f"mixed_precision.{p}") is None:
                self.set(f"mixed_precision.{p}", self.get(f"mixed_precision.{g}"),
                         f"MixedPrecisionConfig.finalize: {p} defaults to {g}", [f"mixed_precision.{g}"])
        names = list(mp.schema.fields) if mp.schema is not None else list(mp.slots)
        values = {}
        for name in names:
            slot = self.interp.get_slot(mp, name)
            values[name] = slot.value if slot is not None else Unknown(f"mixed_precision.{name}")
        anchor = self.anchor("mixed_precision")
        for section in ("model", "optimizer", "ddp"):
            target = self.obj(section)
            if target is None:
                continue
            for name in names:
                if not (target.schema is None or name in target.schema.fields or name in target.slots):
                    continue
                new = values[name]
                slot = self.interp.get_slot(target, name)
                old = slot.value if slot is not None else Unknown(f"{section}.{name} is not a field")
                if _same(old, new):
                    continue  # update_config_with_precision_overrides writes only values that differ
                self._write(target, name, f"{section}.{name}", old, new, anchor,
                            f"mixed precision setup() copies mixed_precision.{name} onto {section} "
                            "(training/mixed_precision.py:138)", ["mixed_precision", f"mixed_precision.{name}"])
                if isinstance(new, Obj) or isinstance(old, Obj):
                    target = self.obj(section)  # the object cache was cleared
                    if target is None:
                        break

    def _havoc_precision(self, section: str, why: str) -> None:
        """Every field the unknown precision recipe would copy onto ``section`` is unknown."""
        schema = self.interp.project.schema_class(MIXED_PRECISION_CLASS)
        names = list(schema.fields) if schema is not None else list(_PRECISION_FALLBACK_FIELDS)
        for name in names:
            if self.has_field(section, name):
                self.set(f"{section}.{name}", Unknown(why), why, ["mixed_precision"])

    def data_parallel_size(self) -> Any:
        tp, pp, cp = (self.get(f"model.{k}") for k in
                      ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"))
        if not (self.world_size and _is_int(tp) and _is_int(pp) and _is_int(cp)):
            return Unknown("data-parallel size needs the world size")
        denom = tp * pp * cp
        if denom <= 0 or self.world_size % denom:
            return Unknown("world size not divisible by TP·PP·CP")
        return self.world_size // denom

    def comm_overlap(self) -> None:
        co = self.get("comm_overlap")
        if not isinstance(co, Obj):
            return
        user = {k: self.get(f"comm_overlap.{k}") for k in COMM_OVERLAP_FIELDS if self.has_field("comm_overlap", k)}
        why = "CommOverlapConfig.setup() (training/comm_overlap.py:604)"
        tp = self.get("model.tensor_model_parallel_size")
        sp = self.get("model.sequence_parallel")
        pp = self.get("model.pipeline_model_parallel_size")
        vp = self.get("model.virtual_pipeline_model_parallel_size")
        vp_size = 1 if vp is None else vp
        # Bridge turns TP overlap off on its private copy of the user settings (comm_overlap.py:444):
        # cfg.comm_overlap keeps True, the model gets False.
        if user.get("tp_comm_overlap") is True and ((_is_int(tp) and tp < 2) or sp is False):
            user["tp_comm_overlap"] = False
        model: dict[str, Any] = {
            "tp_comm_overlap": False, "tp_comm_overlap_cfg": None, "defer_embedding_wgrad_compute": False,
            "wgrad_deferral_limit": -1, "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False,
        }
        if _is_int(pp) and (vp_size is None or _is_int(vp_size)):
            if pp > 1:
                model["overlap_p2p_comm"], model["batch_p2p_comm"] = (True, False) if vp_size > 1 else (False, True)
            else:
                model["overlap_p2p_comm"] = model["batch_p2p_comm"] = False
        else:
            model["overlap_p2p_comm"] = model["batch_p2p_comm"] = Unknown("depends on PP/VPP")
        for k, v in user.items():
            if v is not None and k in COMM_OVERLAP_MODEL_FIELDS:
                model[k] = v
        for k, v in model.items():
            if self.has_field("model", k):
                self.set(f"model.{k}", v, f"{why} copies {k} onto the model", ["comm_overlap"])
        if self.get("ddp.use_distributed_optimizer") is not True:
            return
        dp = self.data_parallel_size()
        opt: dict[str, Any] = {"bucket_size": None, "overlap_grad_reduce": False, "overlap_param_gather": False,
                               "overlap_param_gather_with_optimizer_step": False, "align_param_gather": False}
        if isinstance(dp, Unknown):
            opt = {k: Unknown("depends on the data-parallel size (give --world-size)") for k in opt}
        elif dp > 1:
            opt.update(bucket_size=128 * 1024 * 1024, overlap_grad_reduce=True, overlap_param_gather=True)
            if _is_int(pp) and pp > 1 and _is_int(vp_size) and vp_size > 1:
                opt["align_param_gather"] = True
        for k, v in user.items():
            if v is not None and k in COMM_OVERLAP_DP_FIELDS:
                opt[k] = v
        for section in ("optimizer", "ddp"):
            for k, v in opt.items():
                if self.has_field(section, k):
                    self.set(f"{section}.{k}", v, f"{why} copies {k} onto {section} (distributed optimizer on)",
                             ["comm_overlap"])

    def model_finalize(self) -> None:
        m = "model"
        if self.obj(m) is None:
            return
        tp = self.get("model.tensor_model_parallel_size")
        if self.get("model.sequence_parallel") is True and _is_int(tp) and tp <= 1:
            self.set("model.sequence_parallel", False,
                     "model finalize drops sequence_parallel at TP=1 (models/transformer_config.py:179)",
                     ["model.sequence_parallel", "model.tensor_model_parallel_size"])
        heads = self.get("model.num_attention_heads")
        hidden = self.get("model.hidden_size")
        why = "TransformerConfig.__post_init__ derives it"
        if self.get("model.num_query_groups") is None:
            self.set("model.num_query_groups", heads, f"{why}: num_query_groups defaults to num_attention_heads",
                     ["model.num_attention_heads"])
        if self.get("model.kv_channels") is None and _is_int(heads) and _is_int(hidden) and heads:
            self.set("model.kv_channels", hidden // heads, f"{why}: kv_channels = hidden_size // heads",
                     ["model.hidden_size"])
        if self.get("model.ffn_hidden_size") is None and _is_int(hidden):
            self.set("model.ffn_hidden_size", 4 * hidden, f"{why}: ffn_hidden_size = 4 * hidden_size",
                     ["model.hidden_size"])
        experts = self.get("model.num_moe_experts")
        if _is_int(experts) and experts > 0 and self.get("model.moe_ffn_hidden_size") is None:
            self.set("model.moe_ffn_hidden_size", self.get("model.ffn_hidden_size"),
                     f"{why}: moe_ffn_hidden_size defaults to ffn_hidden_size", ["model.ffn_hidden_size"])
        if self.get("model.expert_tensor_parallel_size") is None:
            ep = self.get("model.expert_model_parallel_size")
            if _is_int(ep):
                self.set("model.expert_tensor_parallel_size", 1 if ep > 1 else tp,
                         "Bridge sets expert_tensor_parallel_size to 1 when EP>1, else TP "
                         "(models/transformer_config.py:80)", ["model.expert_model_parallel_size"])
        if self.get("model.recompute_granularity") == "selective" and self.get("model.recompute_modules") is None:
            self.set("model.recompute_modules", ["core_attn"],
                     f"{why}: recompute_modules defaults to ['core_attn'] (transformer_config.py:1763)",
                     ["model.recompute_granularity"])
        pp = self.get("model.pipeline_model_parallel_size")
        if _is_int(pp) and pp > 1 and self.get("model.pipeline_dtype") is None:
            self.set("model.pipeline_dtype", self.get("model.params_dtype"),
                     "Bridge sets pipeline_dtype to params_dtype when PP>1", ["model.params_dtype"])

    def distributed_optimizer_sync(self) -> None:
        for field in ("use_distributed_optimizer", "overlap_param_gather"):
            a, b = self.get(f"ddp.{field}"), self.get(f"optimizer.{field}")
            if a is True or b is True:
                reason = (f"validate() OR-syncs ddp.{field} and optimizer.{field} "
                          "(training/config.py:1945)")
                self.set(f"ddp.{field}", True, reason, [f"ddp.{field}", f"optimizer.{field}"] if a is True
                         else [f"optimizer.{field}"])
                self.set(f"optimizer.{field}", True, reason, [f"ddp.{field}"] if a is True
                         else [f"optimizer.{field}"])
            elif isinstance(a, Unknown) or isinstance(b, Unknown):
                for s in ("ddp", "optimizer"):
                    if isinstance(self.get(f"{s}.{field}"), Unknown):
                        continue
                    self.set(f"{s}.{field}", Unknown(f"depends on the unknown {field} of the other section"),
                             "distributed-optimizer OR-sync with an unknown side", [f"{s}.{field}"])

    def deprecated_eval_fields(self) -> None:
        """``train.eval_iters/eval_interval/skip_train`` are copied to ``validation`` when set
        (training/config.py:1517)."""
        if self.obj("train") is None or self.obj("validation") is None:
            return
        for name in ("eval_iters", "eval_interval", "skip_train"):
            v = self.get(f"train.{name}")
            if v is None or isinstance(v, Unknown) or not self.has_field("validation", name):
                continue
            self.set(f"validation.{name}", v, f"validate() copies the deprecated train.{name} to validation "
                     "(training/config.py:1517)", [f"train.{name}"])

    def tokenizer_vocab(self) -> None:
        if self.obj("tokenizer") is None or self.obj("model") is None:
            return
        ttype = self.get("tokenizer.tokenizer_type")
        use_tok = self.get("tokenizer.use_tokenizer_vocab_size")
        model_vocab = self.get("model.vocab_size")
        reason = "setup _validate_and_set_vocab_size (training/setup.py:681)"
        if use_tok is True or model_vocab is None:
            if ttype == "NullTokenizer":
                tv = self.get("tokenizer.vocab_size")
                self.set("model.vocab_size", tv,
                         f"{reason}: the NullTokenizer's vocab_size replaces the model's", ["tokenizer.vocab_size"])
                self.set("model.should_pad_vocab", True, f"{reason}: tokenizer vocab is padded",
                         ["tokenizer.vocab_size"])
            else:
                why = "the tokenizer's vocabulary size (known only when the tokenizer loads) replaces the model's"
                self.set("model.vocab_size", Unknown(why), f"{reason}: {why}",
                         ["tokenizer.use_tokenizer_vocab_size"] if use_tok is True else ["model.vocab_size"])
                self.set("model.should_pad_vocab", True, f"{reason}: tokenizer vocab is padded",
                         ["tokenizer.use_tokenizer_vocab_size"] if use_tok is True else ["model.vocab_size"])
        elif _is_int(model_vocab) and self.get("model.should_pad_vocab") is not False:
            self.set("model.should_pad_vocab", False, f"{reason}: an explicit model vocab_size is not padded",
                     ["model.vocab_size"])


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return False
    if isinstance(a, Ext) and isinstance(b, Ext):
        return a == b
    if type(a) is type(b) and isinstance(a, (int, float, str, bool)):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return False


def _plain(v: Any) -> Any:
    return v if type(v) in PLAIN_TYPES else to_json(v)
