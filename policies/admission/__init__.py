"""Governor's built-in admission-pressure policy (not from the papers)."""

from policies.admission.decide import AdmissionInputs, AdmissionParams, decide

__all__ = ["AdmissionInputs", "AdmissionParams", "decide"]
