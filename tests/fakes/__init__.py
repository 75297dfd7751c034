"""Fakes of the vendor GPU libraries (pynvml, amdsmi) for machines without a GPU."""
