"""The daemon's aggregates as SNAPSHOT shows them, grouped every way (``aclprofd.aggregate``
groups and keys), in process (issue 20): each ``group_by``'s row labels and identity
fields, model labels (``model@version``) and their relabelling, the key registry's
filter mask. These paths were exercised end to end only, by daemons in subprocesses."""

from __future__ import annotations

import numpy as np
import pytest
from aclprofd.aggregate.aggregator import Aggregator
from aclprofd.aggregate.keys import OTHER, KeyRegistry, KeySource, model_label_of
from aclprofd.filters import Filter
from helpers.records import make_records

NAMES = {1: "Conv2D", 2: "MatMul", 3: "conv1", 4: "fc1"}


def _agg():
    """Two services' processes and one without a service: svc "a" pid 1 on host h1 runs
    model 5 (labelled bert@v2) on devices 0 and 1; pid 2 on host h2 (no service) runs
    model 7 (no label)."""
    agg = Aggregator(clock=lambda: 1000.0)
    a = KeySource("h1", 1, "a")
    a.set_label(5, model_label_of({"model": "bert", "version": "v2"}))
    r = make_records(4, model=5, types=(1, 2), names=(3, 4), durations=np.array([10, 20, 30, 40]))
    r["device_id"] = [0, 0, 1, 1]
    agg.ingest(a, r, NAMES)
    b = KeySource("h2", 2, None)
    agg.ingest(b, make_records(2, model=7, types=(2,), names=(4,), durations=np.array([100, 300])), NAMES)
    return agg


def _rows(agg, group_by, flt=None):
    return {r["key"]: r for r in agg.snapshot("all", group_by, Filter.parse(flt))["rows"]}


def test_model_label_of_names_the_model_and_its_version():
    assert model_label_of({"model": "bert", "version": "v2"}) == "bert@v2"
    assert model_label_of({"model": "bert"}) == "bert"
    assert model_label_of({"model": "bert", "version": ""}) == "bert"
    assert model_label_of({"version": "v2"}) == ""  # a version alone names nothing
    assert model_label_of({"model": "", "version": "v2"}) == ""
    assert model_label_of({}) == ""


@pytest.mark.parametrize("group_by,want", [
    ("type", {"Conv2D": {"op_type": "Conv2D", "count": 2}, "MatMul": {"op_type": "MatMul", "count": 4}}),
    ("name", {"conv1": {"op_name": "conv1", "count": 2}, "fc1": {"op_name": "fc1", "count": 4}}),
    ("service", {"a": {"service": "a", "count": 4}, "(none)": {"service": None, "count": 2}}),
    ("process", {"a/1": {"host": "h1", "pid": 1, "service": "a", "count": 4},
                 "pid 2": {"host": "h2", "pid": 2, "service": None, "count": 2}}),
    ("device", {"device 0": {"device": 0, "count": 4}, "device 1": {"device": 1, "count": 2}}),
    ("model", {"a/bert@v2": {"service": "a", "model": "bert@v2", "model_id": 5, "pid": 1, "count": 4},
               "pid 2/7": {"service": None, "model": None, "model_id": 7, "pid": 2, "count": 2}}),
])
def test_each_grouping_labels_its_rows_and_gives_their_identity_fields(group_by, want):
    rows = _rows(_agg(), group_by)
    assert set(rows) == set(want)
    for key, fields in want.items():
        assert {k: rows[key].get(k) for k in fields} == fields, (key, rows[key])
        assert set(rows[key]) >= {"key", "count", "total_ns", "p99_ns"}


def test_a_labelled_model_is_one_row_per_service_over_its_processes_and_ids():
    agg = Aggregator(clock=lambda: 1000.0)
    for pid, mid in ((1, 5), (2, 9)):  # two replicas that loaded the same model under different ids
        src = KeySource("h", pid, "svc")
        src.set_label(mid, "bert")
        agg.ingest(src, make_records(3, model=mid, types=(1,), names=(3,)), NAMES)
    unnamed = KeySource("h", 3, "svc")
    agg.ingest(unnamed, make_records(1, model=5, types=(1,), names=(3,)), NAMES)
    rows = _rows(agg, "model")
    assert {k: r["count"] for k, r in rows.items()} == {"svc/bert": 6, "svc/3/5": 1}
    other_svc = Aggregator(clock=lambda: 1000.0)
    src = KeySource("h", 1, None)
    src.set_label(5, "bert")
    other_svc.ingest(src, make_records(2, model=5, types=(1,), names=(3,)), NAMES)
    assert {k: (r["service"], r["model"]) for k, r in _rows(other_svc, "model").items()} == {"bert": (None, "bert")}


def test_relabelling_a_model_starts_new_rows_and_keeps_the_other_models_keys():
    agg = Aggregator(clock=lambda: 1000.0)
    src = KeySource("h", 1, "svc")
    src.set_label(5, "bert")
    both = make_records(2, types=(1,), names=(3,))
    both["model_id"] = [5, 6]
    agg.ingest(src, both, NAMES)
    keys_before = len(agg.keys)
    src.set_label(5, "gpt")          # model id 5 reused for another model
    agg.ingest(src, both, NAMES)
    rows = _rows(agg, "model")
    assert {k: r["count"] for k, r in rows.items()} == {"svc/bert": 1, "svc/gpt": 1, "svc/1/6": 2}
    assert len(agg.keys) == keys_before + 1  # model 6's key is reused, only 5 got a new one
    src.set_label(5, "")             # unlabelled again
    agg.ingest(src, both[:1], NAMES)
    assert _rows(agg, "model")["svc/1/5"]["count"] == 1


@pytest.mark.parametrize("model,labelled", [(0, True), (0xFFFFFFFF, True), (-1, False), (0x1_0000_0000, False)])
def test_set_label_takes_every_u32_model_id_and_nothing_else(model, labelled):
    src = KeySource("h", 1, None)
    src.set_label(model, "m")
    assert src.model_labels == ({model: "m"} if labelled else {})
    src.set_label(model, "")
    assert src.model_labels == {}


def test_the_registry_mask_selects_keys_by_every_filter_field():
    agg = _agg()
    reg = agg.keys
    idents = [tuple(reg.identity(k)) for k in range(len(reg))]

    def selected(obj):
        return sorted(idents[k][:6] for k in np.flatnonzero(reg.mask(Filter.parse(obj))))

    assert idents[0][4] == OTHER  # key 0: the shared "(other)" key
    every = selected(None)
    assert len(every) == len(reg)
    assert selected({"model": 7}) == [("h2", 2, 0, 7, "MatMul", "fc1")]
    assert selected({"pid": 1, "device": 1}) == [("h1", 1, 1, 5, "Conv2D", "conv1"), ("h1", 1, 1, 5, "MatMul", "fc1")]
    assert selected({"host": "h2"}) == selected({"pid": 2})
    assert [i[1] for i in selected({"service": "a"})] == [1, 1, 1, 1]
    assert selected({"type": "^Mat", "name": "fc"}) == [
        ("h1", 1, 0, 5, "MatMul", "fc1"), ("h1", 1, 1, 5, "MatMul", "fc1"), ("h2", 2, 0, 7, "MatMul", "fc1")]
    assert selected({"name": "conv"}) == [("h1", 1, 0, 5, "Conv2D", "conv1"), ("h1", 1, 1, 5, "Conv2D", "conv1")]
    assert selected({"min_duration_ns": 10 ** 9}) == every  # aggregates keep no single record: ignored


def test_snapshot_refuses_an_unknown_grouping_by_name():
    with pytest.raises(ValueError) as exc:
        Aggregator(clock=lambda: 1000.0).snapshot("all", "colour")
    assert str(exc.value) == "group_by must be one of type, name, service, process, device, model, not 'colour'"
    snap = _agg().snapshot()
    assert (snap["window"], snap["group_by"]) == ("all", "type")


def test_registry_keys_beyond_the_cap_share_the_other_key():
    grown = []
    reg = KeyRegistry(2, lambda old, new: grown.append((old, new)))
    a = reg.get(("h", 1, 0, 1, "T", "a", ""), "s")
    b = reg.get(("h", 1, 0, 1, "T", "b", ""), "s")
    c = reg.get(("h", 1, 0, 1, "T", "c", ""), "s")
    assert (a, b) == (1, 2) and c == reg.other == 0
    assert reg.get(("h", 1, 0, 1, "T", "a", ""), "s") == a
    assert len(reg) == 3 and reg.identity(b) == ["h", 1, 0, 1, "T", "b", "s", ""]


def test_keys_registered_in_a_later_batch_keep_the_earlier_keys_figures():
    """The per-key arrays grow when the registry does: what the first keys counted before
    the growth stays (a growth inside the first batch would hide a lost copy)."""
    agg = Aggregator(clock=lambda: 1000.0)
    src = KeySource("h", 1, "svc")
    agg.ingest(src, make_records(2, types=(1,), names=(3,), durations=np.array([10, 30])), NAMES)
    before = agg.keys.capacity
    names = {**NAMES, **{i: f"n{i}" for i in range(10, 300)}}
    agg.ingest(src, make_records(290, types=(1,) * 290, names=tuple(range(10, 300))), names)
    assert agg.keys.capacity > before
    row = _rows(agg, "name")["conv1"]
    assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (2, 40, 10, 30)
    series = {labels[-1]: (count, total) for labels, _buckets, count, total in agg.prometheus_view(by_name=True)}
    assert series["conv1"] == (2, 40)


def test_save_and_load_report_what_they_carried(tmp_path):
    from aclprofd.aggregate.npzfile import read_state

    agg = _agg()
    path = str(tmp_path / "agg.npz")
    agg.save(path)
    meta, _ = read_state(path)
    assert meta["saved_ts"] == 1000.0 and meta["other_records"] == 0
    fresh = Aggregator(clock=lambda: 2000.0)
    assert fresh.load(path) == {"keys": len(agg.keys), "records": 6, "since_ts": agg.reset_ts}  # "(other)" too
    assert {k: r["count"] for k, r in _rows(fresh, "service").items()} == {"a": 4, "(none)": 2}
    empty = str(tmp_path / "empty.npz")
    Aggregator(clock=lambda: 5.0).save(empty)
    assert Aggregator(clock=lambda: 6.0).load(empty) == {"keys": 1, "records": 0, "since_ts": 5.0}  # "(other)"


def test_snapshot_at_a_given_time_and_the_window_lengths():
    agg = _agg()
    assert agg.snapshot("all", "type", None, now=2000.0)["generated_ts"] == 2000.0
    assert agg.snapshot()["generated_ts"] == 1000.0
    assert agg.window_seconds("1m") == 60 and agg.window_seconds("10s") == 10
    with pytest.raises(ValueError):
        agg.window_seconds("2m")


def test_snapshot_summary_shares_and_rates_over_the_span():
    t = [1000.0]
    agg = Aggregator(clock=lambda: t[0])
    a = KeySource("h1", 1, "a")
    r = make_records(4, model=5, types=(1, 2), names=(3, 4), durations=np.array([10, 20, 30, 40]))
    r["device_id"] = [0, 0, 1, 1]
    agg.ingest(a, r, NAMES)
    agg.ingest(KeySource("h2", 2, None), make_records(2, model=7, types=(2,), names=(4,),
                                                      durations=np.array([100, 300])), NAMES)
    snap = agg.snapshot("all", "type", None, now=1010.0)
    assert snap["total_ns"] == 500
    assert {r["key"]: r["pct_time"] for r in snap["rows"]} == {"Conv2D": 8.0, "MatMul": 92.0}
    # 6 records over the 10 s since start; service-less agents are no service
    assert snap["summary"] == {"records": 6, "records_per_s": 0.6, "processes": 2, "services": 1, "devices": [0, 1]}
    # at least 1 s: right after the start the rate is not divided by ~0
    assert agg.snapshot("all", "type", None, now=1000.25)["summary"]["records_per_s"] == 6.0
    # a window counts over its own length, but never before the start
    t[0] = 1030.0
    assert agg.snapshot("1m", "type")["summary"]["records_per_s"] == pytest.approx(6 / 30, abs=1e-3)
    filtered = agg.snapshot("all", "type", Filter.parse({"service": "a"}), now=1010.0)
    assert filtered["summary"] == {"records": 4, "records_per_s": 0.4, "processes": 1, "services": 1,
                                   "devices": [0, 1]}
    assert filtered["total_ns"] == 100 and {r["key"]: r["pct_time"] for r in filtered["rows"]} == {
        "Conv2D": 40.0, "MatMul": 60.0}
    nothing = agg.snapshot("all", "type", Filter.parse({"service": "zzz"}), now=1010.0)
    assert nothing["rows"] == [] and nothing["total_ns"] == 0
    assert nothing["summary"] == {"records": 0, "records_per_s": 0.0, "processes": 0, "services": 0, "devices": []}


def test_records_beyond_the_key_cap_are_one_other_row_from_no_process():
    agg = Aggregator(max_keys=2, clock=lambda: 1000.0)
    names = {1: "T", 3: "a", 4: "b", 5: "c", 6: "d"}
    agg.ingest(KeySource("h", 1, "svc"), make_records(4, types=(1, 1, 1, 1), names=(3, 4, 5, 6),
                                                      durations=np.array([1, 2, 3, 4])), names)
    for group_by in ("name", "service", "process", "device", "model"):
        rows = _rows(agg, group_by)
        assert rows[OTHER]["count"] == 2, (group_by, rows)  # names c and d: no key left for them
    other = _rows(agg, "process")[OTHER]
    assert (other["host"], other["pid"], other["service"]) == (None, None, None)
    snap = agg.snapshot("all", "name", None)
    assert snap["summary"]["processes"] == 1 and snap["summary"]["records"] == 4
