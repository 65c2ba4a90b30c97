"""QuerySmasher: divide-and-conquer matrix mechanisms for linear counting queries under
differential privacy (He et al., "Accurate and Scalable Matrix Mechanisms via Divide and Conquer")."""

__version__ = "0.1.0"
