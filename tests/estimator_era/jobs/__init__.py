"""Estimator-era jobs written for this project, each modelled on a public job (see the README above)."""
