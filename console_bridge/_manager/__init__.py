"""The session manager: a warm pool of verified consoles, handed out once each, with quotas and culling."""
