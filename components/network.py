"""`Network`: VPC, subnets, node security group and NAT egress (or existing IDs, nothing created)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_volcengine import eip, nat, vpc
from vke_gpu_dra_core.config import NetworkConfig

ALL_IPV4: str = "0.0.0.0/0"


class Network(pulumi.ComponentResource):
    """The VPC side of the stack.

    Creates a VPC, one subnet per zone, a security group for the nodes (all traffic inside the VPC
    and from the pod CIDRs, optional SSH, all egress) and a NAT gateway with an EIP and one SNAT
    entry per subnet so nodes reach image registries. With `network.existing*` set it creates
    nothing and passes the given IDs on.
    """

    vpc_id: pulumi.Output[str]
    subnet_ids: pulumi.Output[list[str]]
    security_group_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cfg: NetworkConfig,
        *,
        name_prefix: str,
        extra_ingress_cidrs: Sequence[str] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:Network", name, None, opts)
        if cfg.use_existing:
            self.vpc_id = pulumi.Output.from_input(cfg.existing_vpc_id)
            self.subnet_ids = pulumi.Output.from_input(list(cfg.existing_subnet_ids))
            self.security_group_id = pulumi.Output.from_input(cfg.existing_security_group_id)
            self.register_outputs(self._outputs())
            return

        child = pulumi.ResourceOptions(parent=self)
        network = vpc.Vpc(f"{name}-vpc", cidr_block=cfg.vpc_cidr, vpc_name=f"{name_prefix}-vpc", opts=child)
        subnets = [
            vpc.Subnet(
                f"{name}-subnet-{zone}",
                vpc_id=network.id,
                zone_id=zone,
                cidr_block=cidr,
                subnet_name=f"{name_prefix}-{zone}",
                opts=child,
            )
            for zone, cidr in zip(cfg.zone_ids, cfg.subnet_cidrs, strict=True)
        ]
        group = vpc.SecurityGroup(
            f"{name}-nodes",
            vpc_id=network.id,
            security_group_name=f"{name_prefix}-nodes",
            description="VKE GPU DRA nodes",
            opts=child,
        )
        rules: list[tuple[str, str, str, int, int, str, str]] = [
            ("vpc-all", "ingress", "all", -1, -1, cfg.vpc_cidr, "all traffic inside the VPC"),
            ("egress-all", "egress", "all", -1, -1, ALL_IPV4, "all egress (registries via NAT)"),
        ]
        for i, cidr in enumerate(extra_ingress_cidrs):
            rules.append((f"pods-{i}", "ingress", "all", -1, -1, cidr, "pod network"))
        for i, cidr in enumerate(cfg.ssh_ingress_cidrs):
            rules.append((f"ssh-{i}", "ingress", "tcp", 22, 22, cidr, "SSH"))
        for rule_name, direction, protocol, start, end, cidr, description in rules:
            vpc.SecurityGroupRule(
                f"{name}-sg-{rule_name}",
                security_group_id=group.id,
                direction=direction,
                protocol=protocol,
                port_start=start,
                port_end=end,
                cidr_ip=cidr,
                policy="accept",
                priority=1,
                description=description,
                opts=child,
            )
        gateway = nat.Gateway(
            f"{name}-nat",
            vpc_id=network.id,
            subnet_id=subnets[0].id,
            spec=cfg.nat_spec,
            nat_gateway_name=f"{name_prefix}-nat",
            opts=child,
        )
        address = eip.Address(
            f"{name}-nat-eip",
            billing_type=cfg.eip_billing_type,
            bandwidth=cfg.eip_bandwidth,
            name=f"{name_prefix}-nat",
            opts=child,
        )
        association = eip.Associate(
            f"{name}-nat-eip-association",
            allocation_id=address.id,
            instance_id=gateway.id,
            instance_type="Nat",
            opts=child,
        )
        for zone, subnet in zip(cfg.zone_ids, subnets, strict=True):
            nat.SnatEntry(
                f"{name}-snat-{zone}",
                nat_gateway_id=gateway.id,
                eip_id=address.id,
                subnet_id=subnet.id,
                snat_entry_name=f"{name_prefix}-{zone}",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[association]),
            )
        self.vpc_id = network.id
        self.subnet_ids = pulumi.Output.all(*[s.id for s in subnets]).apply(list)
        self.security_group_id = group.id
        self.register_outputs(self._outputs())

    def _outputs(self) -> dict[str, pulumi.Output]:
        return {"vpcId": self.vpc_id, "subnetIds": self.subnet_ids, "securityGroupId": self.security_group_id}
