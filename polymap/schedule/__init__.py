"""The mapped program, between the decisions and the text: which thread runs which statement
instance and when (``hardware``: the hardware relation and the thread's time layout), the
tiles a staged kernel copies and the barriers between them (``shared``), and the isl AST of
each kernel with its index expressions (``kernel``). ``verify`` proves these relations and
``codegen`` prints them: both import them from here, so what is printed is what is proved.
"""
