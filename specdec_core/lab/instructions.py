"""Training instructions with real variety: task templates x topics x writing styles, written
for the lab (issue 11), disjoint from the frozen held-out yardstick (`data/heldout_prompts.json`).

    make_instructions(n, seed) -> [{"task", "text"}]     # templated, ten task types
    self_instruct_prompts(n, seed) -> [str]               # asks the target to invent questions
    check_disjoint(texts)                                 # raises if one is a held-out prompt

A template is a format string over slots; `check_disjoint` also refuses any template whose
wildcard form matches a held-out prompt, so neither the prompts nor their task templates leak.
"""
from __future__ import annotations

import json
import re

import numpy as np

TOPICS = """volcanoes; black holes; the water cycle; photosynthesis; honeybees; the Roman Empire; the printing press;
vaccines; compound interest; credit scores; electric guitars; chess openings; marathon training; sourdough starters;
composting; solar panels; wind turbines; the stock market; cryptocurrencies; machine learning; neural networks;
password managers; email phishing; cloud storage; version control with git; Docker containers; unit testing;
recursion; binary search; hash tables; regular expressions; the French language; jazz music; the Renaissance;
ancient Egypt; the Great Wall of China; coral reefs; rainforests; glaciers; earthquakes; hurricanes; tides;
the Moon landing; Mars rovers; the International Space Station; time zones; leap years; sleep cycles; caffeine;
intermittent fasting; vitamin D; the immune system; allergies; dental hygiene; posture at a desk; remote work;
job interviews; writing a resume; public speaking; negotiating a salary; starting a small business; marketing on
social media; customer service; team meetings; time management; procrastination; meditation; journaling; minimalism;
saving for retirement; renting an apartment; moving to a new city; learning a language; studying for exams; online
courses; homeschooling; raising teenagers; potty training; adopting a cat; training a puppy; keeping chickens;
growing tomatoes; pruning roses; lawn care; bicycle maintenance; car batteries; tire pressure; road trips;
camping in the rain; packing light; jet lag; airport security; budget travel in Europe; Japanese cuisine; Indian
spices; baking cookies; making pasta from scratch; fermentation; knife skills; food safety; vegetarian protein;
hydration; running shoes; yoga for beginners; strength training; stretching; cycling in traffic; swimming technique;
the Olympic Games; football tactics; basketball history; tennis scoring; photography composition; film cameras;
painting with watercolors; learning the piano; songwriting; poetry forms; science fiction novels; Shakespeare;
fairy tales; mythology; board games; video game design; 3D printing; home networking; Wi-Fi dead zones; smartphone
batteries; screen time; online privacy; copyright; recycling plastics; climate change; electric cars; public
transport; city planning; bridges; skyscrapers; the internet; the telephone; radio waves; magnets; electricity at
home; circuit breakers; plumbing leaks; painting a room; insulation; houseplants; birdwatching; whales; octopuses;
ants; dinosaurs; evolution; DNA; the periodic table; acids and bases; gravity; friction; rainbows; clouds;
snowflakes; deserts; mountains; rivers; the ocean floor; lighthouses; trains; airplanes; submarines; rockets;
elections; taxes; the United Nations; world history; maps; the metric system; probability; statistics; fractions;
prime numbers; geometry; algebra; spreadsheets; keyboard shortcuts; data backups; a birthday party; a wedding
toast; a retirement card; friendship; loneliness; kindness; gratitude; moving on after a breakup; a first date;
small talk; a noisy neighbor; a lost wallet; a rainy weekend; a summer festival; a snowy morning; an old castle""".replace("\n", " ")
TOPICS = [t.strip() for t in TOPICS.split(";") if t.strip()]

LANGS = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]
SENTENCES = ["I am looking for a cheap hotel near the city centre.", "Could you help me carry these bags?",
             "The museum opens at nine and closes at five.", "We are going to the mountains next weekend.",
             "My sister is a teacher and my brother is a doctor.", "How much does this jacket cost?",
             "I forgot my umbrella at the restaurant.", "The children are playing in the garden.",
             "Please call me when you arrive at the airport.", "This soup is too salty for me.",
             "I have been learning to play the guitar for two years.", "The train was late because of the snow.",
             "Can I pay by card?", "Our meeting has been moved to Thursday afternoon.", "I love reading books in the park.",
             "Turn left at the second traffic light.", "She bought fresh bread and cheese at the market.",
             "Excuse me, is this seat free?", "It is raining again, so we will stay at home.", "Happy birthday, my friend!"]
LANGUAGES = ["Python", "JavaScript", "Java", "C", "Go", "Rust", "TypeScript", "Bash", "SQL", "C++"]
CODE_TASKS = ["reverses a linked list", "counts the vowels in a string", "merges two sorted lists",
              "returns the n-th Fibonacci number", "removes duplicates from a list while keeping order",
              "converts Celsius to Fahrenheit", "checks if a year is a leap year", "finds the largest number in an array",
              "parses a date string like 2024-03-15", "flattens a nested list", "computes the factorial of n",
              "sorts a list of people by age", "validates an email address", "reads a text file and counts words",
              "implements a stack with push and pop", "checks whether two words are anagrams",
              "sums the digits of an integer", "generates a random password", "finds the median of a list",
              "capitalizes the first letter of every word"]
PERSONAS = ["student", "teacher", "nurse", "software engineer", "retired person", "parent", "small business owner",
            "traveler", "chef", "gardener", "teenager", "scientist", "musician", "new employee"]

TEMPLATES = {
    "explanation": ["Explain {topic} in simple words.", "How does {topic} work?", "What is the science behind {topic}?",
                    "Could you give me a short explanation of {topic}?", "I never understood {topic}. Can you help?",
                    "Describe {topic} for a beginner.", "What should everyone know about {topic}?",
                    "Tell me the basics of {topic}.", "Why is {topic} important?"],
    "howto": ["What are some tips for {topic}?", "How do I get started with {topic}?", "Any advice on {topic}?",
              "What is a good routine for {topic}?", "Walk me through {topic} step by step.",
              "What mistakes should I avoid with {topic}?", "How can I get better at {topic}?"],
    "code": ["Implement a function in {lang} that {code}.", "In {lang}, how would I write code that {code}?",
             "Show me {lang} code that {code}, with comments.", "I need a {lang} snippet that {code}.",
             "Can you write a small {lang} program that {code}?", "Explain how to write a function that {code} in {lang}."],
    "list": ["Give me a list of facts about {topic}.", "List some common questions about {topic}.",
             "What are five things to know about {topic}?", "Make a bullet list about {topic}.",
             "Name a few important points about {topic}.", "Write a checklist for {topic}."],
    "summary": ["Summarize what you know about {topic} in three sentences.", "Give me a one-paragraph overview of {topic}.",
                "In a few bullet points, sum up {topic}.", "What is the short version of {topic}?",
                "Briefly, what is {topic} about?"],
    "comparison": ["Compare {topic} and {topic2}.", "What do {topic} and {topic2} have in common?",
                   "How are {topic} and {topic2} different?", "Pros and cons of {topic} versus {topic2}?",
                   "Which matters more, {topic} or {topic2}, and why?"],
    "creative": ["Write a poem about {topic}.", "Write a short story involving {topic}.", "Write a song verse about {topic}.",
                 "Compose a haiku on {topic}.", "Write a funny dialogue about {topic}.", "Write a tweet about {topic}.",
                 "Write a children's rhyme about {topic}.", "Describe {topic} as if you were a pirate."],
    "translation": ["How would I say \"{sentence}\" in {language}?", "Can you put this sentence into {language}? {sentence}",
                    "Render in {language}: {sentence}", "{language} version of this, please: {sentence}",
                    "Translate the following sentence from English into {language}.\n\n{sentence}"],
    "maths": ["What is {a} times {b}?", "Calculate {a} plus {b} minus {c}.", "If I save {c} dollars a week, how much do I have after {b} weeks?",
              "What is {a} divided by {d}?", "A box holds {d} apples. How many boxes do I need for {a} apples?",
              "What is {d} percent of {a}?", "Is {a} a prime number?", "What is the square of {b}?",
              "A rectangle is {b} cm by {c} cm. What is its perimeter?"],
    "chat": ["Hi! Can we talk about {topic}?", "I'm bored. Tell me something fun about {topic}.",
             "My friend says {topic} is overrated. What do you think?", "I'm a {persona}. What should I know about {topic}?",
             "Good morning! Any thoughts on {topic} today?", "Do you have an opinion on {topic}?",
             "I had a long day. Can you cheer me up with something about {topic}?"],
}
STYLES = [lambda s: s, lambda s: s, lambda s: s.lower().rstrip(".?!"), lambda s: s + " Keep it short.",
          lambda s: "Quick question: " + s[0].lower() + s[1:], lambda s: s + " Please be detailed.",
          lambda s: s + " Use simple language.", lambda s: "Hey, " + s[0].lower() + s[1:]]


def make_instructions(n: int, seed: int = 0) -> list[dict]:
    """n templated instructions [{"task", "text"}], tasks drawn evenly, fixed seed, no duplicates."""
    rng = np.random.default_rng(seed)
    tasks, out, seen = list(TEMPLATES), [], set()
    for _ in range(20 * n):
        if len(out) == n:
            break
        task = tasks[len(out) % len(tasks)]
        template = TEMPLATES[task][rng.integers(len(TEMPLATES[task]))]
        topic, topic2 = rng.choice(TOPICS, 2, replace=False)
        text = template.format(
            topic=topic, topic2=topic2, lang=rng.choice(LANGUAGES), code=rng.choice(CODE_TASKS),
            language=rng.choice(LANGS), sentence=rng.choice(SENTENCES), persona=rng.choice(PERSONAS),
            a=int(rng.integers(12, 999)), b=int(rng.integers(3, 60)), c=int(rng.integers(2, 90)), d=int(rng.integers(2, 30)))
        text = STYLES[rng.integers(len(STYLES))](text)
        if text not in seen:
            seen.add(text)
            out.append({"task": task, "text": text})
    return out


def self_instruct_prompts(n: int, seed: int = 1) -> list[str]:
    """Prompts that ask the target to invent a user question (answered later at high temperature)."""
    rng = np.random.default_rng(seed)
    asks = ["Write one question that a {persona} might ask an AI assistant about {topic}. Reply with the question only.",
            "Invent a realistic request a {persona} could type into a chatbot, related to {topic}. Only the request.",
            "Give an example of something a {persona} would ask for help with. Just the question."]
    return [asks[rng.integers(len(asks))].format(persona=rng.choice(PERSONAS), topic=rng.choice(TOPICS)) for _ in range(n)]


def clean_question(text: str) -> str | None:
    """The first line of a generated question, unquoted; None when it does not look like one."""
    line = text.strip().split("\n")[0].strip()
    quoted = re.search(r"[\"“]([^\"”]{12,})[\"”]?\s*$", line)   # 'A student might ask, "…?"' -> the question
    line = (quoted.group(1) if quoted else line).strip().strip('"“”').strip()
    line = re.sub(r"^(a:\s*)?(question|request)\s*:\s*", "", line, flags=re.I)
    words = line.split()
    return line if 4 <= len(words) <= 60 and line[-1:] in "?.!" else None


def heldout_prompts() -> list[dict]:
    """The frozen yardstick: [{"name", "task", "text"}] from data/heldout_prompts.json."""
    from .. import data
    return json.loads(data.file("heldout_prompts.json").read_text())["prompts"]


def heldout_texts() -> list[str]:
    return [p["text"] for p in heldout_prompts()]


def check_disjoint(texts, held=None) -> None:
    """Raise ValueError if a training text is a held-out prompt or a template matches a yardstick
    prompt; held: the held-out texts the training texts must avoid (default the yardstick's;
    lab/natural.py passes every held-out file, some of which are templated themselves)."""
    norm = lambda s: " ".join(s.lower().split())
    leaked = {norm(h) for h in (heldout_texts() if held is None else held)} & {norm(t) for t in texts}
    held = heldout_texts()
    if leaked:
        raise ValueError(f"training instructions include held-out prompts: {sorted(leaked)[:3]}")
    prefix, suffix = r"(hey, |quick question: )?", r"( keep it short\.| please be detailed\.| use simple language\.)?"
    for task, templates in TEMPLATES.items():
        for template in templates:
            pattern = prefix + re.sub(r"\\\{\w+\\\}", ".+", re.escape(template.lower())) + suffix
            for h in held:
                # The lower-case style drops the final punctuation: try the prompt both ways.
                if any(re.fullmatch(pattern + end, h.lower(), flags=re.S) for end in ("", r"[.?!]*")):
                    raise ValueError(f"template {template!r} ({task}) matches the held-out prompt {h!r}")
