"""Writes notebooks/data/instructions.jsonl, the instruction data set of notebook 05 (CC0: see README.md).

    python3 notebooks/data/make_instructions.py

Short prompt/completion pairs written for the notebook: sums and differences in words, opposites,
capitals, the day or month after another, plurals, words in capitals, words reversed, colors. The
notebook fine-tunes the committed fixture model (hf/testdata/llama3_untied), whose tokenizer has 256
tokens learned from Genesis and Exodus: no digits and no capital Q or X, which the text avoids (the
script checks it). Every prompt is "Instruction: ...\\nResponse:" (as Alpaca's), every completion " ...", so that a
model learns the format. Deterministic: the same file every run (Python's standard library only).
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "instructions.jsonl")

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
OPPOSITES = [("hot", "cold"), ("day", "night"), ("light", "darkness"), ("up", "down"), ("old", "young"),
             ("big", "small"), ("fast", "slow"), ("open", "closed"), ("early", "late"), ("full", "empty"),
             ("happy", "sad"), ("high", "low"), ("rich", "poor"), ("strong", "weak"), ("wet", "dry"),
             ("hard", "soft"), ("long", "short"), ("heavy", "light"), ("near", "far"), ("first", "last"),
             ("good", "evil"), ("above", "below"), ("inside", "outside"), ("begin", "end"), ("buy", "sell"),
             ("give", "take"), ("win", "lose"), ("push", "pull"), ("true", "false"), ("clean", "dirty"),
             ("thick", "thin"), ("wide", "narrow"), ("north", "south"), ("east", "west"), ("left", "right"),
             ("laugh", "cry"), ("friend", "enemy"), ("summer", "winter"), ("sweet", "bitter"), ("loud", "silent")]
CAPITALS = [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin"),
            ("Egypt", "Cairo"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
            ("Canada", "Ottawa"), ("Brazil", "Brasilia"), ("Peru", "Lima"), ("Chile", "Santiago"),
            ("Kenya", "Nairobi"), ("Greece", "Athens"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
            ("Poland", "Warsaw"), ("Ireland", "Dublin"), ("Portugal", "Lisbon"), ("Austria", "Vienna"),
            ("Russia", "Moscow"), ("Turkey", "Ankara"), ("Mexico", "Mexico City"), ("Cuba", "Havana"),
            ("Denmark", "Copenhagen"), ("Finland", "Helsinki"), ("Hungary", "Budapest"), ("Iran", "Tehran"),
            ("Thailand", "Bangkok"), ("Argentina", "Buenos Aires"), ("Belgium", "Brussels"),
            ("Australia", "Canberra")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
PLURALS = [("lamb", "lambs"), ("tree", "trees"), ("river", "rivers"), ("star", "stars"), ("city", "cities"),
           ("child", "children"), ("man", "men"), ("woman", "women"), ("mouse", "mice"), ("goose", "geese"),
           ("foot", "feet"), ("tooth", "teeth"), ("sheep", "sheep"), ("box", "boxes"), ("church", "churches"),
           ("knife", "knives"), ("leaf", "leaves"), ("wolf", "wolves"), ("baby", "babies"), ("story", "stories"),
           ("house", "houses"), ("bird", "birds"), ("stone", "stones"), ("field", "fields"), ("horse", "horses"),
           ("brother", "brothers"), ("ox", "oxen"), ("fish", "fish"), ("day", "days"), ("king", "kings")]
CAPS = ["moses", "egypt", "river", "garden", "mountain", "bread", "water", "light", "stone", "silver",
        "gold", "camel", "tent", "well", "seed", "field", "cloud", "fire", "wind", "sea", "land", "night",
        "morning", "evening", "city", "gate", "house", "king", "servant", "brother"]
PHRASES = ["light and darkness", "the river runs", "bread and water", "the king spoke", "a house of stone",
           "seed and harvest", "the evening came", "gold and silver", "the wind blew", "heaven and earth",
           "a well of water", "the morning star", "cattle and sheep", "the gate was open", "fire and cloud",
           "my brother said", "go in peace", "the land was good", "a tent by the sea", "we went down"]
COLORS = [("the sky on a clear day", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"),
          ("blood", "red"), ("a ripe banana", "yellow"), ("an orange", "orange"), ("a lemon", "yellow"),
          ("milk", "white"), ("a fire engine", "red"), ("the night sky", "black"), ("a leaf in spring", "green"),
          ("chocolate", "brown"), ("a ripe tomato", "red"), ("the sun", "yellow"), ("a cloud", "white"),
          ("the sea", "blue"), ("soil", "brown"), ("silver", "grey"), ("gold", "golden")]


def records():
    """The pairs, as (prompt question, answer)."""
    rng = random.Random(5)
    out = []
    sums = [(a, b) for a in range(11) for b in range(11) if a + b <= 20]
    for a, b in rng.sample(sums, 60):
        out.append((f"What is {NUMBERS[a]} plus {NUMBERS[b]}?", f"{NUMBERS[a + b].capitalize()}."))
    diffs = [(a, b) for a in range(21) for b in range(a + 1)]
    for a, b in rng.sample(diffs, 40):
        out.append((f"What is {NUMBERS[a]} minus {NUMBERS[b]}?", f"{NUMBERS[a - b].capitalize()}."))
    for word, opposite in OPPOSITES:
        out.append((f"What is the opposite of {word}?", f"{opposite.capitalize()}."))
    for country, city in CAPITALS:
        out.append((f"What is the capital of {country}?", f"{city}."))
    for i, day in enumerate(DAYS):
        out.append((f"Which day comes after {day}?", f"{DAYS[(i + 1) % 7]}."))
        out.append((f"Which day comes before {day}?", f"{DAYS[(i - 1) % 7]}."))
    for i, month in enumerate(MONTHS):
        out.append((f"Which month comes after {month}?", f"{MONTHS[(i + 1) % 12]}."))
    for word, plural in PLURALS:
        out.append((f"What is the plural of {word}?", f"{plural.capitalize()}."))
    for word in CAPS:
        out.append((f"Write in capital letters: {word}", word.upper()))
    for phrase in PHRASES:
        out.append((f"Reverse the words: {phrase}", " ".join(reversed(phrase.split()))))
    for thing, color in COLORS:
        out.append((f"What color is {thing}?", f"{color.capitalize()}."))
    rng.shuffle(out)
    return out


def main():
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPRSTUVWYZ !',-.:;?()\n")
    with open(OUT, "w") as f:
        for question, answer in records():
            prompt, completion = f"Instruction: {question}\nResponse:", f" {answer}"
            bad = set(prompt + completion) - allowed
            if bad:
                raise SystemExit(f"{prompt!r} {completion!r}: characters the fixture's tokenizer lacks: {sorted(bad)}")
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    print(f"wrote {OUT}: {len(records())} records")


if __name__ == "__main__":
    main()
