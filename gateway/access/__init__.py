"""Access control as S3 evaluates it: bucket policies, ACLs, object ownership, public access
blocks. Pure code over parsed documents (no I/O): `policy` (the policy language), `acl`
(grants, canned ACLs, AccessControlPolicy XML), `controls` (ownership controls, public access
block), `evaluate` (the decision), `identity` (canonical ids), `actions` (S3 action names)."""
