"""One XID table for the exporter's labels, the alert text and the work-lost set."""

from gpuscale.fields.xid import BY_CODE, WORK_LOST_XIDS, XIDS, xid_message, xid_messages


def test_every_explained_code_is_in_upstreams_message_table() -> None:
    assert all(x.code in xid_messages() for x in XIDS)


def test_codes_are_unique_and_explained_with_an_action() -> None:
    assert len(BY_CODE) == len(XIDS)
    assert all(x.meaning and x.action for x in XIDS)


def test_work_lost_codes_are_explained_and_exclude_single_bit_rate() -> None:
    assert BY_CODE.keys() >= WORK_LOST_XIDS
    # 92 is a high single-bit ECC rate: corrected errors, no work lost (NVIDIA's XID catalogue).
    assert 92 not in WORK_LOST_XIDS
    assert {48, 79} <= WORK_LOST_XIDS


def test_upstream_message_for_off_the_bus() -> None:
    assert xid_message(79) == xid_messages()[79]
    assert "fallen off the bus" in xid_message(79).lower()
