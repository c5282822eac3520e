"""The alarm corpus (``corpus``), its replay through the detector's rules (``replay``) and the
recorder of its real PyTorch runs (``record.py``)."""
