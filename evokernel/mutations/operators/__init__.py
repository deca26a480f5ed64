"""The operators, one module per family, and nothing else: a module here registers its operator classes
(`evokernel.mutations.register`) as it is imported; `evokernel.mutations.registered_operators()` imports them all.
A new operator is one new module in this folder."""
