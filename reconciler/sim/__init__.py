"""Local Kubernetes control plane and the simulated GPU fleet that plays kubelet and the vendor
operator's install, for tests and the demo."""
