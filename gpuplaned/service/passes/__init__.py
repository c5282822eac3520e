"""The actors' passes: the scheduler's dispatch, the detector's rules, failure policies,
retention, the budget pass, what new checkpoints set off, resume, the SDK spools' replay."""
