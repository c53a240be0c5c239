"""The spec's ``sequencer.standby``: replicated durability by default, folders of its own, never
the sequencer's host; placement gives it a bundle of its own on its host."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raydex.cluster.control.placement import PlacementError, placement_for
from raydex.cluster.control.spec import SpecError, load_spec
from raydex.cluster.topology import NumaNode, Topology

REPO = Path(__file__).resolve().parents[2]


def spec_text(**sequencer: object) -> str:
    tree = yaml.safe_load((REPO / "raydex.yaml").read_text())
    tree["sequencer"].update(sequencer)
    tree["sequencer"]["host"] = "host-a"
    return yaml.safe_dump(tree)


def hosts() -> dict[str, Topology]:
    one = Topology((NumaNode(0, (0, 1, 2, 3, 4, 5, 6, 7), (10,)),))
    return {"host-a": one, "host-b": one}


def test_a_named_standby_makes_durability_replicated_with_folders_of_its_own() -> None:
    spec = load_spec(spec_text(standby={"host": "host-b"}))
    seq = spec.sequencer
    assert seq.config.durability == "replicated" and seq.standby is not None
    assert seq.standby.wal_dir == f"{seq.config.wal_dir}-standby"
    assert seq.standby.snapshot_dir == f"{spec.snapshot.config.dir}-standby"
    assert load_spec(spec_text()).sequencer.config.durability == "local"
    kept = load_spec(spec_text(standby={"host": "host-b"}, durability="local"))
    assert kept.sequencer.config.durability == "local"  # said so: the standby follows, unasked


def test_a_standby_on_the_sequencers_host_or_replicated_without_one_is_refused() -> None:
    with pytest.raises(SpecError, match="another host"):
        load_spec(spec_text(standby={"host": "host-a"}))
    with pytest.raises(SpecError, match="needs a standby"):
        load_spec(spec_text(durability="replicated"))
    with pytest.raises(SpecError, match="not settable here"):
        load_spec(spec_text(replication_port=1))


def test_placement_gives_the_standby_its_own_bundle_on_its_host() -> None:
    plan = {
        g.name: g for g in placement_for(load_spec(spec_text(standby={"host": "host-b"})), hosts())
    }
    (bundle,) = plan["standby"].bundles
    assert (bundle.role, bundle.host) == ("standby", "host-b")
    assert plan["sequencer"].bundles[0].host == "host-a"
    with pytest.raises(PlacementError, match="another host"):
        tree = yaml.safe_load(spec_text(standby={"host": "host-b"}))
        del tree["sequencer"]["host"]  # the head: host-a, the first host
        tree["sequencer"]["standby"]["host"] = "host-a"
        placement_for(load_spec(yaml.safe_dump(tree)), hosts())
