def check(answer):
    return answer == "42"
