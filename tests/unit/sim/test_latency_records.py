"""The fluid queue's records: columns that grow as they fill and keep what they hold."""

from gpuscale.sim.latency import LatencyRecords


def test_columns_grow_past_their_first_rows_and_keep_every_row() -> None:
    rec = LatencyRecords()
    first = rec.per_portion[0].size
    for i in range(first + 10):  # past the first allocation
        rec.add_portion(i, float(i), 0.5 * i, 2.0, -0.01 * i)
        rec.add_second(1.0, float(i), 4, 0.25 * i, float(i))
    assert rec.per_portion[0].size > first  # it grew
    assert rec.portions == rec.seconds == first + 10
    assert rec.step.tolist() == list(range(first + 10))
    assert rec.count.tolist() == rec.entered.tolist() == [float(i) for i in range(first + 10)]
    assert rec.wait_s[-1] == 0.5 * (first + 9)
    assert rec.log_g_at_entry[3] == -0.01 * 3
    assert rec.busy.tolist() == [0.25 * i for i in range(first + 10)]
    assert rec.servers.tolist() == [4] * (first + 10)


def test_a_view_writes_through_to_the_records() -> None:
    rec = LatencyRecords()
    rec.add_portion(0, 5.0, 0.0, 1.0, 0.0)
    rec.count[0] -= 2.0  # as InService.remove lowers a portion
    assert rec.count.tolist() == [3.0]
    assert rec.entered.tolist() == [5.0]  # what entered service is kept


def test_a_column_looked_up_on_the_class_is_its_descriptor() -> None:
    """As help() and introspection look it up: no records, so no rows, and no error."""
    column = LatencyRecords.count
    assert type(column).__name__ == "_Rows"
