"""Seeded filler prose in several languages, for long-context haystacks.

Contract: ``filler(language, seed, min_chars)`` returns paragraphs of plain everyday sentences
(who did what, where and when) in ``en``, ``de``, ``es`` or ``ko``, the same text for the same
arguments, with no downloads. The lexicons are written here; sentences are assembled from a
template per language so that word order and inflection are right (German verb-second order,
Korean subject/object particles chosen by the final consonant of the noun). By default the text
mentions people by name, so that a needle's name is not the only name in the haystack (NoLiMa's
point: the answer must not stand out by its surface form); ``people=False`` writes scenes with
nobody in them instead, for models too small to pick one name out of many.

The vocabulary deliberately avoids the words the long-context tasks test for (cities, landmarks,
the coded words and variable names): ``FILLER_WORDS`` lists every word a language can produce
so that a test can check it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

LANGUAGES = ("en", "de", "es", "ko")

# Names used by the filler (the long-context tasks draw their needle names from another list).
_NAMES = {
    "en": ["Mara", "Tobias", "Elena", "Jonas", "Priya", "Oscar", "Helen", "Samir", "Greta",
           "Victor", "Nadia", "Felix", "Irene", "Marcus", "Ada", "Hugo"],
    "de": ["Anna", "Lukas", "Marie", "Paul", "Sophie", "Jan", "Lea", "Felix", "Clara", "Moritz",
           "Emma", "Jakob", "Frieda", "Henrik", "Ida", "Karl"],
    "es": ["Lucía", "Mateo", "Sofía", "Diego", "Valeria", "Pablo", "Carmen", "Andrés", "Elena",
           "Javier", "Marta", "Tomás", "Inés", "Raúl", "Alba", "Sergio"],
    "ko": ["민준", "서연", "지호", "하은", "도윤", "수아", "예준", "지유", "시우", "서윤", "주원",
           "하린", "건우", "채원", "우진", "지안"],
}

# Scenes for a haystack without people (``filler(..., people=False)``): the same times and
# places, with nobody in them, so a needle's name (and a distractor's) is the only person in
# the text: the NoLiMa level small models can answer (docs/suites.md). German and Spanish keep
# the verb before the subject after a time phrase (German verb-second; Spanish inverts
# intransitive clauses naturally); Korean puts the place (…에서) before the scene.
_SCENES: dict[str, list[Any]] = {
    "en": ["a bell rang", "the wind was blowing", "a soft rain fell", "a dog barked",
           "the lamps were lit", "the leaves were falling", "the shutters rattled",
           "a kettle whistled", "the clock struck the hour", "the pigeons gathered"],
    "de": [("läutete", "eine Glocke"), ("wehte", "der Wind"), ("fiel", "leiser Regen"),
           ("bellte", "ein Hund"), ("brannten", "die Lampen"), ("fielen", "die Blätter"),
           ("klapperten", "die Fensterläden"), ("pfiff", "ein Wasserkessel"),
           ("schlug", "die Uhr"), ("sammelten sich", "die Tauben")],
    "es": ["sonó una campana", "soplaba el viento", "caía una lluvia suave", "ladró un perro",
           "se encendieron las lámparas", "caían las hojas", "golpeaban las persianas",
           "silbó una tetera", "dio la hora el reloj", "se juntaron las palomas"],
    "ko": ["종이 울렸습니다", "바람이 불었습니다", "조용히 비가 내렸습니다", "개가 짖었습니다",
           "등불이 켜졌습니다", "나뭇잎이 떨어졌습니다", "덧문이 덜컹거렸습니다",
           "주전자가 소리를 냈습니다", "시계가 정각을 알렸습니다", "비둘기들이 모였습니다"],
}

_EN: dict[str, list[Any]] = {
    "time": ["In the morning", "Early on Sunday", "After lunch", "Late in the evening",
             "On a rainy afternoon", "Before dawn", "At the end of the week", "Last spring",
             "During the holidays", "One quiet Tuesday"],
    "place": ["at the market", "in the garden", "by the river", "in the old library",
              "at the bakery", "in the kitchen", "on the balcony", "at the bus stop",
              "in the workshop", "near the school", "at the harbour", "in the village square"],
    "action": ["bought fresh bread", "repaired a broken chair", "read a long letter",
               "planted three rows of beans", "painted the fence green", "wrote a short poem",
               "cooked a pot of soup", "fed the neighbour's cat", "sorted a box of old photos",
               "tuned a borrowed guitar", "swept the wooden floor", "folded the clean laundry",
               "carried water for the plants", "counted the coins in a jar",
               "sharpened every pencil", "baked a plum cake"],
    "coda": ["and then went home.", "while the radio played softly.", "without saying a word.",
             "and felt rather proud.", "because nobody else had time.", "as the light faded.",
             "and laughed about it later.", "before anyone noticed."],
}

_DE: dict[str, list[Any]] = {
    "time": ["Am Morgen", "Am Sonntag", "Nach dem Mittagessen", "Spät am Abend",
             "An einem regnerischen Nachmittag", "Vor Sonnenaufgang", "Am Ende der Woche",
             "Im letzten Frühling", "In den Ferien", "An einem ruhigen Dienstag"],
    "place": ["auf dem Markt", "im Garten", "am Fluss", "in der alten Bücherei",
              "in der Bäckerei", "in der Küche", "auf dem Balkon", "an der Bushaltestelle",
              "in der Werkstatt", "bei der Schule", "am Hafen", "auf dem Dorfplatz"],
    # (verb, object): the verb goes second, the object after the place.
    "action": [("kaufte", "frisches Brot"), ("reparierte", "einen kaputten Stuhl"),
               ("las", "einen langen Brief"), ("pflanzte", "drei Reihen Bohnen"),
               ("strich", "den Zaun grün"), ("schrieb", "ein kurzes Gedicht"),
               ("kochte", "einen Topf Suppe"), ("fütterte", "die Katze der Nachbarn"),
               ("sortierte", "eine Kiste alter Fotos"), ("stimmte", "eine geliehene Gitarre"),
               ("fegte", "den Holzboden"), ("faltete", "die saubere Wäsche"),
               ("zählte", "die Münzen im Glas"), ("backte", "einen Pflaumenkuchen")],
    "coda": ["Danach ging {name} nach Hause.", "Im Radio lief leise Musik.",
             "Niemand sagte ein Wort.", "Das machte {name} ein wenig stolz.",
             "Sonst hatte niemand Zeit.", "Langsam wurde es dunkel.",
             "Später lachten alle darüber.", "Keiner hatte etwas bemerkt."],
}

_ES: dict[str, list[Any]] = {
    "time": ["Por la mañana", "El domingo temprano", "Después del almuerzo",
             "Tarde por la noche", "Una tarde de lluvia", "Antes del amanecer",
             "Al final de la semana", "La primavera pasada", "Durante las vacaciones",
             "Un martes tranquilo"],
    "place": ["en el mercado", "en el jardín", "junto al río", "en la vieja biblioteca",
              "en la panadería", "en la cocina", "en el balcón", "en la parada del autobús",
              "en el taller", "cerca de la escuela", "en el puerto", "en la plaza del pueblo"],
    "action": ["compró pan fresco", "arregló una silla rota", "leyó una carta larga",
               "plantó tres filas de judías", "pintó la valla de verde",
               "escribió un poema corto", "cocinó una olla de sopa",
               "dio de comer al gato del vecino", "ordenó una caja de fotos viejas",
               "afinó una guitarra prestada", "barrió el suelo de madera",
               "dobló la ropa limpia", "contó las monedas de un frasco",
               "horneó un pastel de ciruelas"],
    "coda": ["y luego volvió a casa.", "mientras la radio sonaba bajito.",
             "sin decir una palabra.", "y se sintió bastante orgulloso.",
             "porque nadie más tenía tiempo.", "mientras caía la luz.",
             "y más tarde se rió de ello.", "antes de que nadie se diera cuenta."],
}

# Korean: nouns take 은/는 (topic) and 을/를 (object) by whether the last syllable has a final
# consonant (batchim); verbs are in the polite past. Word order: time, subject, place, object,
# verb.
_KO: dict[str, list[Any]] = {
    "time": ["아침에", "일요일 일찍", "점심을 먹은 뒤에", "늦은 저녁에", "비 오는 오후에",
             "해가 뜨기 전에", "주말에", "지난봄에", "방학 동안", "조용한 화요일에"],
    "place": ["시장에서", "정원에서", "강가에서", "오래된 도서관에서", "빵집에서", "부엌에서",
              "발코니에서", "버스 정류장에서", "작업실에서", "학교 근처에서", "항구에서",
              "마을 광장에서"],
    # (object noun, verb): the particle is added to the noun.
    "action": [("신선한 빵", "샀습니다"), ("부러진 의자", "고쳤습니다"), ("긴 편지", "읽었습니다"),
               ("콩 세 줄", "심었습니다"), ("울타리", "초록색으로 칠했습니다"),
               ("짧은 시", "썼습니다"), ("수프 한 냄비", "끓였습니다"),
               ("이웃집 고양이", "돌보았습니다"), ("오래된 사진 상자", "정리했습니다"),
               ("빌린 기타", "조율했습니다"), ("나무 바닥", "쓸었습니다"),
               ("깨끗한 빨래", "갰습니다"), ("병 속의 동전", "세었습니다"),
               ("자두 케이크", "구웠습니다")],
    "coda": ["그리고 집으로 돌아갔습니다.", "라디오에서는 조용한 음악이 흘렀습니다.",
             "아무도 말을 하지 않았습니다.", "조금 뿌듯했습니다.",
             "다른 사람들은 시간이 없었습니다.", "날이 천천히 어두워졌습니다.",
             "나중에 모두 그 일을 떠올리며 웃었습니다.", "아무도 눈치채지 못했습니다."],
}


def has_final_consonant(word: str) -> bool:
    """Whether the last Hangul syllable of ``word`` has a final consonant (batchim).

    A precomposed syllable is ``0xAC00 + (initial·21 + medial)·28 + final``, final 0 meaning
    none (Unicode Standard, ch. 3.12, "Conjoining Jamo Behavior")."""
    code = ord(word[-1]) - 0xAC00
    return 0 <= code < 11172 and code % 28 != 0


_LEX: dict[str, dict[str, list[Any]]] = {"en": _EN, "de": _DE, "es": _ES, "ko": _KO}


def _topic(noun: str) -> str:
    return noun + ("은" if has_final_consonant(noun) else "는")


def _object(noun: str) -> str:
    return noun + ("을" if has_final_consonant(noun) else "를")


def _scene(language: str, rng: random.Random) -> str:
    when, where = rng.choice(_LEX[language]["time"]), rng.choice(_LEX[language]["place"])
    scene = rng.choice(_SCENES[language])
    if language == "de":
        verb, subject = scene
        return f"{when} {verb} {subject} {where}."
    if language == "ko":
        return f"{when} {where} {scene}."
    return f"{when}, {scene} {where}."


def _sentence(language: str, rng: random.Random, people: bool) -> str:
    if not people:
        return _scene(language, rng)
    name = rng.choice(_NAMES[language])
    if language == "en":
        lex = _EN
        return (f"{rng.choice(lex['time'])}, {name} {rng.choice(lex['action'])} "
                f"{rng.choice(lex['place'])} {rng.choice(lex['coda'])}")
    if language == "de":
        verb, obj = rng.choice(_DE["action"])
        first = f"{rng.choice(_DE['time'])} {verb} {name} {rng.choice(_DE['place'])} {obj}."
        return first + " " + str(rng.choice(_DE["coda"])).format(name=name)
    if language == "es":
        lex = _ES
        return (f"{rng.choice(lex['time'])}, {name} {rng.choice(lex['action'])} "
                f"{rng.choice(lex['place'])} {rng.choice(lex['coda'])}")
    if language == "ko":
        obj, verb = rng.choice(_KO["action"])
        return (f"{rng.choice(_KO['time'])} {_topic(name)} {rng.choice(_KO['place'])} "
                f"{_object(obj)} {verb}. {rng.choice(_KO['coda'])}")
    raise ValueError(f"no filler for language {language!r} (one of {', '.join(LANGUAGES)})")


def _paragraphs(language: str, rng: random.Random, people: bool) -> Iterator[str]:
    while True:
        yield " ".join(_sentence(language, rng, people) for _ in range(rng.randint(3, 6)))


def filler(language: str, seed: str | int, min_chars: int, *, people: bool = True) -> str:
    """At least ``min_chars`` characters of ``language`` prose, paragraphs split by a blank line;
    the same for the same (language, seed, min_chars, people). With ``people=False`` the
    the text has nobody in it: scenes of the same times and places ("a bell rang")."""
    if language not in LANGUAGES:
        raise ValueError(f"no filler for language {language!r} (one of {', '.join(LANGUAGES)})")
    # The seed string of the default stays as it was: existing suites keep their haystacks.
    rng = random.Random(f"filler-{language}-{seed}" + ("" if people else "-scenes"))
    out: list[str] = []
    size = 0
    for para in _paragraphs(language, rng, people):
        out.append(para)
        size += len(para) + 2
        if size >= min_chars:
            break
    return "\n\n".join(out)


def filler_names(language: str) -> list[str]:
    """The people the filler of ``language`` mentions."""
    return list(_NAMES[language])


def filler_words(language: str) -> set[str]:
    """Every word (lower-cased, split on non-word characters) the filler of ``language`` can
    produce: for checking that a task's words never occur in the haystack by accident."""
    lex = _LEX[language]
    text = " ".join(_NAMES[language])
    for values in [*lex.values(), _SCENES[language]]:
        for v in values:
            text += " " + (" ".join(v) if isinstance(v, tuple) else v)
    words = set(re.findall(r"\w+", text.lower()))
    if language == "ko":  # the particles are appended to nouns
        words |= {w + p for w in list(words) for p in ("은", "는", "을", "를")}
    return words
