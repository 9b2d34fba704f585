"""The laws, each fitted by the machinery of fitting/:

joint.py       Kaplan et al. 2020's joint form L(N, D) with an offset (form=joint)
chinchilla.py  approach 3: L(N, D) = E + A/N^alpha + B/D^beta, and FORMS (this law or the joint one)
single.py      L(x) = E + A/x^alpha for x = N, non-embedding N, D, or C over the compute envelope
frontier.py    the frontier table, the bootstrap laws' losses and optima, and the power laws
               that approaches 1 and 2 fit to their optima
approach1.py   approach 1: the lower envelope of training curves
approach2.py   approach 2 on an iso-FLOP design only: a parabola near each budget's minimum
"""
