"""A time-sliced or MPS claim still takes its whole device, as the scheduler allocates it."""

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_planner.claims import parse_claim_template

from .helpers import exactly, fit, pool, template


@pytest.mark.parametrize(
    "sharing",
    [
        {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
    ],
)
def test_shared_claims_count_their_devices_as_allocated(sharing):
    obj = template(exactly("gpu", 1))
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
    obj["spec"]["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": facts.DRIVER_NAME, "parameters": params}}
    ]
    tpl = parse_claim_template(obj)
    pools = [pool(gpus=2, low=1, high=2)]
    assert fit(tpl, replicas=4, pools=pools).fits
    over = fit(tpl, replicas=5, pools=pools)
    assert not over.fits
    assert "2 fit per node" in over.reasons()[0]
