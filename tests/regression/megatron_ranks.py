"""One gloo rank of ``test_megatron_ranks.py``: megatron-core's real parallel state, and what verl's Megatron engine
and Trinity's legacy Megatron actor read from it for their loss weights (a child process, so it imports megatron-core
and verl's engine itself)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from types import SimpleNamespace

# (tp, pp, cp) at world 4; dp is what is left
RANK_SHAPES = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 1, 2), (2, 2, 1), (1, 2, 2), (1, 1, 4)]
WORLD = 4
NUM_MICROBATCHES = 4


def megatron_rank(rank: int, store: str, out: str) -> None:
    """Initialize each shape of ``RANK_SHAPES`` with megatron-core on gloo and write what this rank sees."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu
    from megatron.core.pipeline_parallel.schedules import forward_step_calc_loss
    from megatron.core.transformer import TransformerConfig
    from megatron_shapes import MegatronShape
    from verl.workers.engine.megatron.transformer_impl import MegatronEngine

    timeout = datetime.timedelta(seconds=120)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD, timeout=timeout)
    # the engine's own methods, on an engine that holds only what they read
    engine = SimpleNamespace(engine_config=SimpleNamespace(dynamic_context_parallel=False))
    seen = []
    for tp, pp, cp in RANK_SHAPES:
        mpu.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp
        )
        shape = MegatronShape(dp=WORLD // (tp * pp * cp), tp=tp, pp=pp, cp=cp)
        group = MegatronEngine.get_data_parallel_group(engine)
        dp_rank = MegatronEngine.get_data_parallel_rank(engine)
        # data parallel rank d holds 10 ** d tokens, on the CPU as 0008's count is: the sum shows who is counted how
        # often (a tensor, pipeline or context parallel copy counted too would add to a digit)
        tokens = torch.tensor(10**dp_rank)
        dist.all_reduce(tokens, group=group)
        legacy_tokens = torch.tensor(10**dp_rank)
        dist.all_reduce(legacy_tokens, group=mpu.get_data_parallel_group())  # Trinity 0008's call
        config = TransformerConfig(
            num_layers=1,
            hidden_size=8,
            num_attention_heads=2,
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            context_parallel_size=cp,
            pipeline_dtype=torch.float32,
        )
        scheduled, _ = forward_step_calc_loss(
            model=torch.nn.Module(),
            output_tensor=torch.tensor(1.0),
            loss_func=lambda output: (output, {}),  # two values, as verl's engine and Trinity's actor return
            config=config,
            vp_stage=None,
            collect_non_loss_data=False,
            num_microbatches=NUM_MICROBATCHES,
            forward_data_store=[],
        )
        coordinates = shape.coordinates(rank)
        seen.append(
            {
                "shape": str(shape),
                "rank": rank,
                "coordinates": [
                    mpu.get_tensor_model_parallel_rank(),
                    mpu.get_context_parallel_rank(),
                    dp_rank,
                    mpu.get_pipeline_model_parallel_rank(),
                ],
                "expected_coordinates": [coordinates.tp, coordinates.cp, coordinates.dp, coordinates.pp],
                "dp_group": dist.get_process_group_ranks(group),
                "expected_dp_group": shape.data_parallel_group(rank),
                "dp_size": MegatronEngine.get_data_parallel_size(engine),
                "legacy_dp_size": mpu.get_data_parallel_world_size(),
                "dp_cp_size": mpu.get_data_parallel_world_size(with_context_parallel=True),
                "tokens": int(tokens),
                "legacy_tokens": int(legacy_tokens),
                "expected_tokens": sum(10**d for d in range(shape.dp)),
                "last_stage": mpu.is_pipeline_last_stage(),
                "scheduled_loss": float(scheduled),
            }
        )
        mpu.destroy_model_parallel()
    Path(out).write_text(json.dumps(seen), encoding="utf-8")
    dist.destroy_process_group()
