"""What the scenarios, the demo and the benchmarks run against: simulated GPU nodes (the daemon and a kubelet
stand-in), the testbed of a control plane with them, the plugin's identity, the webhook, the cluster as a user
talks to it, and the verdicts the checks compare."""
