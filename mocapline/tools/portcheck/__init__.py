"""`mocapline port-check`: the robot port's conformance kit (docs/protocol.md, "Conformance kit")."""
