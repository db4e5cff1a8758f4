"""The quantities read the same way everywhere (labctl/units.py): a Kubernetes quantity in
its base unit, a message size in bytes; anything else one ValueError saying what is
expected."""
import pytest

from labctl.units import message_size, quantity


def test_a_kubernetes_quantity_is_read_in_its_base_unit():
    assert quantity("500m") == 0.5                  # exactly: milli is a division
    assert quantity("4Gi") == 4 * 2 ** 30 and quantity("1.5G") == 1.5e9 and quantity(2) == 2


@pytest.mark.parametrize("value", ["abc", True, "1e3", "", "4GB", "x" * 40])
def test_anything_else_is_no_quantity(value):
    with pytest.raises(ValueError, match="not a Kubernetes quantity: .* \\(examples: 2, 500m, 4Gi\\)"):
        quantity(value)


def test_a_message_size_is_bytes_with_or_without_a_unit():
    assert [message_size(v) for v in (65536, "64KiB", "4MiB", "1MB", "1k")] == [65536, 65536, 4 << 20, 10 ** 6, 1024]


@pytest.mark.parametrize("value", [0, "2TiB", "x", "-1"])
def test_a_size_outside_1_byte_to_1_tib_is_refused(value):
    with pytest.raises(ValueError, match="expected a size in bytes from 1 to 1TiB"):
        message_size(value)
