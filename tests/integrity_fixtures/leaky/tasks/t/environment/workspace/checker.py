# A sample checker, not the judge one.
print("checks nothing")
