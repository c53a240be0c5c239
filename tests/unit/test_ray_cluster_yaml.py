"""ray_cluster.yaml passes Ray's own cluster-launcher validation, as `ray up` runs it.

`ray up` prepares the config (for the `local` provider: `prepare_local`, then defaults) and
validates it against Ray's JSON schema (`ray.autoscaler._private.util.validate_config`); both
steps run here.
"""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def raw() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    return config


def test_ray_cluster_yaml_passes_rays_schema_validator(raw: dict[str, Any]) -> None:
    validate_config(prepare_config(raw))


def test_it_uses_the_local_provider_without_node_types(raw: dict[str, Any]) -> None:
    assert raw["provider"]["type"] == "local"
    assert "available_node_types" not in raw


def test_the_host_addresses_are_documentation_placeholders(raw: dict[str, Any]) -> None:
    test_net_1 = ipaddress.ip_network("192.0.2.0/24")  # RFC 5737: never routed
    ips = [raw["provider"]["head_ip"], *raw["provider"]["worker_ips"]]
    assert ips and all(ipaddress.ip_address(ip) in test_net_1 for ip in ips)


def test_head_and_workers_start_ray_with_this_hosts_node_args(raw: dict[str, Any]) -> None:
    head = " ".join(raw["head_start_ray_commands"])
    workers = " ".join(raw["worker_start_ray_commands"])
    assert "ray start --head" in head and "$(" in head and "node-args --role head)" in head
    assert "ray start --address=" in workers and "node-args --role worker)" in workers


def test_setup_installs_raydex_on_every_host(raw: dict[str, Any]) -> None:
    setup = " ".join(raw["setup_commands"])
    assert "pip install" in setup and "raydex" in setup
    assert raw["file_mounts"]["~/raydex"] == "."


def test_rays_validator_rejects_an_unknown_key(raw: dict[str, Any]) -> None:
    broken = copy.deepcopy(raw)
    broken["worker_count"] = 3
    with pytest.raises(jsonschema.ValidationError, match="worker_count"):
        validate_config(prepare_config(broken))


def test_the_local_provider_rejects_available_node_types(raw: dict[str, Any]) -> None:
    broken = copy.deepcopy(raw)
    broken["available_node_types"] = {"w": {"node_config": {}, "resources": {"numa0": 8}}}
    with pytest.raises(click.ClickException, match="available_node_types is not supported"):
        prepare_config(broken)
