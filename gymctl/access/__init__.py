"""Access: roles and the permission matrix, invitations, registrations, join links, legal consent,
email ownership and the ownership trail (spec A 2.3 to 2.9, 5.2, 5.3)."""
