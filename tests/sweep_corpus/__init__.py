"""The sweep corpus (``corpus``): planted trials early stopping must stop and must not, and
their replay through the rules (``replay``)."""
