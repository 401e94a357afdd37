"""Users of machine/model/ledger: summaries and (later) verdicts.  Never print, never exit."""
