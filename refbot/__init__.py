"""The reference chatbot (the system under test we ship) and the embedded local stack."""
