"""Cold starts by model size: the weights' bytes over the node's read bandwidth, plus start."""

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.sim.coldstart import (
    CONTAINER_START_S,
    MODELS,
    READ_BANDWIDTHS,
    ColdStart,
    ColdStartStream,
    ModelSpec,
)


def test_load_time_is_weights_over_bandwidth_plus_container_start():
    # Llama-3-70B in bf16 is 141.2 GB; a PCIe 4.0 NVMe SSD reads 6.5 GB/s: 21.7 s of load
    cold = ColdStart.from_model(MODELS["llama-3-70b"], READ_BANDWIDTHS["nvme"])
    expected = 70.6e9 * 2 / 6.5e9 + CONTAINER_START_S
    assert cold.quantile(0.0) == pytest.approx(expected)
    assert cold.quantile(1.0) == pytest.approx(expected)
    assert cold.mean_s == pytest.approx(expected)
    draws = cold.sample(np.random.default_rng(0), 5)
    assert draws == pytest.approx([expected] * 5)


def test_bigger_weights_and_slower_storage_load_proportionally_longer():
    small, big = MODELS["llama-3-8b"], MODELS["llama-3-70b"]
    gp3 = READ_BANDWIDTHS["ebs-gp3"]
    t_small = ColdStart.from_model(small, gp3, extra_s=0.0).mean_s
    t_big = ColdStart.from_model(big, gp3, extra_s=0.0).mean_s
    assert t_big / t_small == pytest.approx(70.6 / 8.03)
    # a default gp3 volume (125 MiB/s) is 8x slower than one provisioned at 1,000 MiB/s
    slow = ColdStart.from_model(big, READ_BANDWIDTHS["ebs-gp3-default"], extra_s=0.0).mean_s
    assert slow / t_big == pytest.approx(8.0)
    # 141.2 GB at 125 MiB/s: about 18 minutes, where GenTD26's loads take about 30 s
    assert slow == pytest.approx(70.6e9 * 2 / (125 * 2**20))
    assert slow > 17 * 60


def test_fp8_weights_halve_the_load():
    bf16 = ModelSpec("m", 8e9)
    fp8 = ModelSpec("m", 8e9, bytes_per_parameter=1.0)
    bw = READ_BANDWIDTHS["nvme"]
    assert ColdStart.from_model(fp8, bw, 0.0).mean_s * 2 == pytest.approx(
        ColdStart.from_model(bf16, bw, 0.0).mean_s
    )


def test_the_stream_draws_the_model_load_for_every_pod():
    cold = ColdStart.from_model(MODELS["mistral-7b"], READ_BANDWIDTHS["nvme"])
    assert ColdStartStream(cold, 3).draws(4) == pytest.approx([cold.mean_s] * 4)


def test_gentd26_stays_the_default():
    assert ColdStart() == ColdStart.from_gentd26()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ModelSpec("m", 0), "model 'm': parameters and bytes_per_parameter must be > 0"),
        (lambda: ModelSpec("m", 1e9, bytes_per_parameter=-2), "must be > 0"),
        (lambda: ColdStart.from_model(MODELS["llama-2-7b"], 0.0), "read bandwidth 0 B/s"),
    ],
)
def test_bad_inputs_are_one_line_config_errors(make, message):
    with pytest.raises(ConfigError, match=message) as info:
        make()
    assert "\n" not in str(info.value)
