import orjson
import pytest

from pushjobs.audit.chain import (
    EMPTY,
    GENESIS,
    Head,
    Link,
    TailRecord,
    content_hash,
    fold,
    head_from_tail,
    link_batch,
    read_link,
    splice,
    trailer_key,
)


def test_the_field_goes_in_front_and_readers_see_the_value_unchanged():
    value = orjson.dumps({"kind": "job_state", "job_id": "j1"})
    spliced = splice(value, Link("leader", 3, GENESIS))
    doc = orjson.loads(spliced)
    assert next(iter(doc)) == "_chain"
    assert {k: v for k, v in doc.items() if k != "_chain"} == orjson.loads(value)
    assert read_link(spliced) == Link("leader", 3, GENESIS)


def test_an_empty_object_takes_the_field_too():
    assert orjson.loads(splice(b"{}", Link("x", 0, GENESIS)))["_chain"]["seq"] == 0


def test_each_carrier_links_to_the_one_before_and_passengers_fold_in():
    batch = [("job:1/targets/0", b'["a","b"]'), ("job:1", b'{"type":"start"}'), ("k", None)]
    linked = link_batch("leader", EMPTY, batch)
    (ck, cv), (rk, rv), (_tk, tv) = linked.batch
    assert cv == b'["a","b"]' and tv is None  # passengers unchanged
    chunk_link = fold(GENESIS, content_hash(ck, cv))
    assert read_link(rv) == Link("leader", 1, chunk_link)
    assert linked.head.seq == 2
    assert linked.head.link == fold(content_hash(rk, rv), content_hash("k", None))
    assert [e.seq for e in linked.entries] == [0, 1, 2]
    assert linked.entries[2].content is None  # a tombstone is listed as one


def test_a_chain_continues_from_a_head():
    first = link_batch("leader", EMPTY, [("a", b'{"n":1}')])
    second = link_batch("leader", first.head, [("b", b'{"n":2}')])
    assert read_link(second.batch[0][1]) == Link("leader", 1, first.head.link)


def test_a_new_writer_finds_the_head_in_the_tail_passengers_included():
    first = link_batch("leader", EMPTY, [("a", b'{"n":1}'), ("b", None)])
    tail = [TailRecord(k, v) for k, v in first.batch]
    assert head_from_tail("leader", tail) == first.head
    assert head_from_tail("nobody", tail) is None


def test_on_a_shared_topic_a_batch_ending_with_a_passenger_is_closed_by_a_trailer():
    ends = link_batch("leader", EMPTY, [("a", b'{"n":1}'), ("b", None)], shared=True)
    assert [k for k, _ in ends.batch] == ["a", "b", trailer_key("leader")]
    assert read_link(ends.batch[-1][1]) == Link(
        "leader", 2, fold(content_hash("a", ends.batch[0][1]), content_hash("b", None))
    )
    assert ends.head.seq == 2
    closed = link_batch("leader", EMPTY, [("b", None), ("a", b'{"n":1}')], shared=True)
    assert [k for k, _ in closed.batch] == ["b", "a"]  # already ends with a carrier
    alone = link_batch("leader", EMPTY, [("b", None)])
    assert [k for k, _ in alone.batch] == ["b"]  # one writer: no need


def test_two_streams_interleaved_each_find_their_own_head():
    # The leader deletes a definition, the owner its fire state: tombstones in turn. Each
    # batch closed by its trailer, each writer's tombstone is before its own carrier.
    lead = link_batch("leader", EMPTY, [("schedule:x", b'{"n":1}')], shared=True)
    own = link_batch("owner", EMPTY, [("fire:x", b'{"n":9}')], shared=True)
    lead2 = link_batch("leader", lead.head, [("schedule:x", None)], shared=True)
    own2 = link_batch("owner", own.head, [("fire:x", None)], shared=True)
    tail = [TailRecord(k, v) for k, v in lead.batch + own.batch + lead2.batch + own2.batch]
    assert head_from_tail("leader", tail) == lead2.head
    assert head_from_tail("owner", tail) == own2.head
    # A passenger with no carrier after it is the last carrier's (one writer, or a batch
    # cut short before its trailer, which its writer never sealed).
    cut = [*tail, TailRecord("fire:y", None)]
    assert head_from_tail("owner", cut) == Head(
        own2.head.seq + 1, fold(own2.head.link, content_hash("fire:y", None))
    )
    assert head_from_tail("leader", cut) == lead2.head


@pytest.mark.parametrize(
    "value", [None, b'{"n":1}', b'{"_chain":{"by":"x","seq":"1","prev":"00"}}', b'{"_chain":']
)
def test_a_value_with_no_usable_field_has_no_link(value):
    assert read_link(value) is None


def test_only_the_field_in_front_counts():
    inner = splice(b'{"n":1}', Link("old", 7, GENESIS))
    outer = splice(inner, Link("new", 1, GENESIS))
    assert read_link(outer) == Link("new", 1, GENESIS)


def test_an_object_written_outside_any_chain_is_in_no_stream():
    first = link_batch("leader", EMPTY, [("a", b'{"n":1}')])
    outside = TailRecord("k", b'{"by":"admin"}')
    tomb = link_batch("leader", first.head, [("a", None)])
    tail = [TailRecord(k, v) for k, v in first.batch] + [outside] + [TailRecord("a", None)]
    assert head_from_tail("leader", tail) == tomb.head
