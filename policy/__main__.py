"""Entry point the Pulumi CLI runs: serve the policy pack's analyzer."""

from vke_dra_policies.server import serve

serve()
