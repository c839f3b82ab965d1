"""Studies of the suite, one package each (see dreambench.study)."""
