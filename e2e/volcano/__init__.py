"""Volcano beside the e2e control plane: vc-scheduler and vc-controller-manager built from the source snapshot
in ../shared/volcano (`build.sh`), its CRDs, and a launcher that runs them beside the default kube-scheduler,
configured as a Volcano user configures them for DRA (docs/volcano.md)."""
