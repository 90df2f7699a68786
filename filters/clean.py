"""Line-level boilerplate removal after extraction, before the quality rules judge the document:
- C4's policy and javascript line rules (Raffel et al. 2020, §2.2; datatrove C4QualityFilter
  `filter_policy` / `filter_javascript`): main-content extractors still let cookie banners and
  "enable JavaScript" notices through; C4 drops any line containing these phrases. The javascript rule
  is narrowed to the notices it is for: a line naming JavaScript goes when it also says what a notice
  says (enable, disable, turn on or off, requires, activate: `JAVASCRIPT_NOTICE`). C4's own rule drops
  every line that names the language, and with it the tutorials and reference documentation of the
  language (docs/design.md, "Main-content extraction");
- label lines: a line that is only the label of an ad slot ("Advertisement", "Story continues below
  advertisement", "Anzeige", "广告"), which news templates set between paragraphs, or a photo credit
  ("Photo: Hau Dinh, AP") under each rendering of a gallery's caption, where extractors keep them as part
  of the article. Five ad labels cost a Gizmodo story FineWeb's duplicate-line rule, and the credits under
  a caption rendered twice or three times cost AP stories the same rule once their caption copies are gone;
  and a line of skip links ("Skip to main content", "Skip to contentSkip to footer", "Zum Inhalt springen":
  the links that let a keyboard user bypass a page's menus, WCAG 2.4.1), which extractors keep, often as
  the text's first line, where the first-line guard of the line model keeps them; a heading of other
  articles, sharing or comments ("Related stories", "Artikel teilen"), a widget's line ("Print",
  "Loading...", "5 min read"), or a line holding a form's notice ("Your email address will not be
  published") or a call to action ("Subscribe to our newsletter", "Dir hat der Artikel gefallen? Jetzt
  teilen"), and, from a heading of other articles, a comment form or an author box in the text's second
  half, the rest of the text (teasers, author box, thread);
- link-list lines: a line that only lists links ("http://ffp5727.cn | http://www.ffp5727.cn | ...",
  a link farm's footer; "example.com · example.org · ...") carries no prose, and left in, a page's
  line-level rules judge it by that line (RefinedWeb's line-wise corrections, Penedo et al. 2023,
  likewise take out the navigation and counter lines that extraction leaves);
- with `quality.boilerplate_model`, the lines filters/boilerplate.py's context model calls boilerplate
  (menus one item per line, share bars, bylines, photo credits, "Related" lists: unpunctuated lines judged with
  their neighbours), first, on the extractor's text as the model was fitted on it;
- rendering copies, last: a sentence line that occurs two to four times in one page keeps its first
  occurrence, and a line cut off by an ellipsis that another line of the page begins with goes
  (`remove_rendering_copies`).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import accumulate

from filters.boilerplate import join_without, remove_context_boilerplate
from filters.line_end import ends_with_terminal

POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
_POLICY = re.compile("|".join(re.escape(s) for s in POLICY_SUBSTRINGS), re.I)
_JAVASCRIPT = re.compile(r"\bjavascript\b", re.I)
# What a "JavaScript is off" notice says besides the name: enable / disable (not the prose verb
# "enables"), turn or switch on / off, requires JavaScript / JavaScript (is) required, activate (not
# "activates"), and the verbs of the notices in German, French, Spanish and Italian (aktivieren, activer,
# habilitar, abilitare). No nested quantifiers: linear in the line.
JAVASCRIPT_NOTICE = re.compile(r"\b(?:en|dis)abl(?:e|ed|ing)\b|\b(?:turn|switch)(?:ed)?\s+(?:it\s+)?(?:on|off)\b"
                               r"|\brequires?\s+javascript\b|\bjavascript\s+(?:is\s+)?required\b"
                               r"|\bactivat(?:e|ed|ing)\b|\bactiv(?:er|ez|é)\b|\baktivier|\bhabilit|\babilit", re.I)


def _is_boilerplate_line(line: str) -> bool:
    """A policy line, or a notice that JavaScript is needed (the module docstring)."""
    return bool(_POLICY.search(line) or (_JAVASCRIPT.search(line) and JAVASCRIPT_NOTICE.search(line)))


def remove_boilerplate_lines(text: str) -> tuple[str, int]:
    """(text without policy lines and JavaScript notices, number of lines removed)."""
    lowered = text.lower()  # substring tests first: far cheaper than the regex on clean pages
    if "javascript" not in lowered and not any(s in lowered for s in POLICY_SUBSTRINGS):
        return text, 0
    lines = text.split("\n")
    kept = [line for line in lines if not _is_boilerplate_line(line)]
    return "\n".join(kept).strip(), len(lines) - len(kept)


# Label lines: the whole line, case-insensitive.
# - An ad slot's label, between optional dashes or brackets ("- Advertisement -", "[Anzeige]").
AD_LABELS = ("advertisement", "advertisements", "advertising", "sponsored", "sponsored content",
             "story continues below", "story continues below advertisement", "article continues below",
             "article continues below advertisement", "continue reading below",
             "continue reading below advertisement", "anzeige", "werbung", "publicité", "publicidad", "pubblicità",
             "реклама", "广告")
_AD_LABEL = re.compile(r"^[\s\-–—\[(]*(?:" + "|".join(re.escape(s) for s in AD_LABELS) + r")[\s\-–—\])]*$", re.I)
_AD_LABEL_MAX_CHARS = 48  # longer than any label with its dashes and spaces: the regex never sees prose
# - A photo credit: one of CREDIT_LABELS, a colon and a name of at most CREDIT_MAX_WORDS words that ends no
#   sentence, perhaps in brackets ("Photo: David Zalubowski, STF / Associated Press", "(Image: © NASA/ESA)").
#   The name may hold dots ("Gene J. Puskar"); a caption that describes the picture is a sentence or longer.
CREDIT_LABELS = ("photo", "photos", "photograph", "photo credit", "photo credits", "image", "image credit",
                 "picture", "credit", "foto", "fotos", "bild", "crédit photo")
CREDIT_MAX_WORDS = 8
_CREDIT = re.compile(r"^\s*[(\[]?\s*(?:" + "|".join(re.escape(s) for s in CREDIT_LABELS)
                     + r")\s*:\s*[^!?\s][^!?]*(?<![.\s])[)\]]?\s*$", re.I)
_CREDIT_MAX_CHARS = 100


# - A line of skip links: one or more "skip to" / "jump to" links of at most SKIP_TARGET_MAX_WORDS words each
#   ("Skip to main contentSkip to footer": the links' texts run together), or a skip link of another
#   language (SKIP_LINKS), between separators and arrows at most.
SKIP_LINKS = ("zum inhalt springen", "zum hauptinhalt springen", "direkt zum inhalt", "springe zum inhalt",
              "zur navigation springen", "aller au contenu", "aller au contenu principal", "passer au contenu",
              "passer au contenu principal", "saltar al contenido", "saltar al contenido principal",
              "ir al contenido", "ir al contenido principal", "salta al contenuto", "vai al contenuto",
              "passa al contenuto", "passa al contenuto principale", "pular para o conteúdo", "ir para o conteúdo",
              "naar de inhoud springen", "ga naar de inhoud", "direct naar de inhoud", "spring naar de inhoud",
              "перейти к содержимому", "перейти к содержанию")
SKIP_TARGET_MAX_WORDS = 3
_SKIP_MAX_CHARS = 160
_SKIP_START = re.compile(r"[\s\-–—>→»]*(?:skip|jump|" + "|".join(re.escape(s) for s in SKIP_LINKS) + ")", re.I)
_SKIP_TO = re.compile(r"(?:skip|jump)\s+to(?![^\W\d_])", re.I)  # "...contentSkip to footer": no \b before it
_SKIP_LINK = re.compile("|".join(re.escape(s) for s in sorted(SKIP_LINKS, key=len, reverse=True)), re.I)  # longest first
_SKIP_SEPARATORS = re.compile(r"[\s\-–—>→↓⤵»|·•:]+")


def _is_skip_link_line(line: str) -> bool:
    pieces = _SKIP_TO.split(_SKIP_LINK.sub(" ", line))
    return (not _SKIP_SEPARATORS.sub("", pieces[0])
            and all(len(_SKIP_SEPARATORS.sub(" ", p).split()) <= SKIP_TARGET_MAX_WORDS for p in pieces[1:]))


# - A section heading that says what follows is not the article: other articles ("Related stories",
#   "Das könnte Sie auch interessieren", "À lire aussi", "Zobacz również"), sharing ("Share this article",
#   "Artikel teilen") or readers' comments ("Comments", "Leave a reply"). The whole line, case-insensitive,
#   between bullets, arrows and end punctuation, with an optional count ("Vos réactions (11)"). Where one of
#   TAIL_SECTIONS (other articles, a comment form, the author box) stands in the second half of the text,
#   it is where the article ends: it and every line after it go (a teaser list, an author box, a comment
#   thread); in the first half it goes alone. An inline box's "Read also" ("Lesen Sie auch", "Leggi anche"),
#   which news sites set between paragraphs, and a bare "Related" or "Comments" (a tutorial's section on code
#   comments) go alone wherever they stand.
TAIL_SECTIONS = frozenset((
    "related articles", "related posts", "related stories", "related content", "related news",
    "you may also like", "you might also like", "recommended for you", "more stories", "more on this topic",
    "recent posts", "leave a reply", "leave a comment",
    "das könnte sie auch interessieren", "das könnte dich auch interessieren", "auch interessant",
    "ähnliche beiträge", "ähnliche artikel", "verwandte artikel", "weitere artikel", "weitere beiträge",
    "neueste beiträge", "neueste artikel", "schreibe einen kommentar", "hinterlasse einen kommentar",
    "sur le même sujet", "articles similaires", "vous aimerez aussi", "laisser un commentaire",
    "te puede interesar", "noticias relacionadas", "artículos relacionados", "deja un comentario",
    "articoli correlati", "lascia un commento", "notícias relacionadas", "deixe um comentário",
    "gerelateerde artikelen", "laat een reactie achter", "about the author", "über den autor", "über die autorin",
    "à propos de l'auteur", "sobre el autor", "sull'autore", "sobre o autor", "over de auteur", "o autorze",
    "discussion about this post"))
SECTION_LABELS = TAIL_SECTIONS | frozenset((
    "related", "latest news", "mehr zum thema", "lesen sie auch", "à lire aussi", "lire aussi", "leggi anche",
    "veja também", "leia também", "zobacz również", "czytaj także", "comments", "kommentare", "commentaires",
    "comentarios", "commenti", "comentários", "reacties", "komentarze", "related links", "related reading",
    "related topics", "you may also be interested in", "you might also be interested in", "recommended articles",
    "recommended stories", "read more", "read also",
    "also read", "read next", "keep reading", "more news", "more articles", "most read", "most popular",
    "most viewed", "trending now", "latest posts", "latest articles", "recent articles", "popular posts",
    "popular articles", "don't miss", "top stories", "editor's picks", "want more", "share", "share this",
    "share this article", "share this post", "share this story", "share this page", "share on facebook",
    "share on twitter", "follow us", "post a comment", "join the discussion",
    "das könnte ihnen auch gefallen", "das könnte dir auch gefallen", "ebenfalls interessant", "ähnliche themen",
    "verwandte beiträge", "weitere themen", "weitere nachrichten", "mehr zu diesem thema", "mehr artikel",
    "mehr beiträge", "zum weiterlesen", "lies auch", "weiterlesen", "neueste nachrichten", "aktuelle beiträge",
    "aktuelle artikel", "aktuelle news", "aktuelle nachrichten", "meistgelesen", "meistgelesene artikel",
    "die meistgelesenen artikel", "meistgelesene beiträge", "beliebte beiträge", "beliebte artikel",
    "empfohlene artikel", "top themen", "top-themen", "artikel teilen", "beitrag teilen", "diesen artikel teilen",
    "diesen beitrag teilen", "seite teilen", "teilen", "jetzt teilen", "mit freunden teilen", "folge uns",
    "folgen sie uns", "kommentar schreiben", "einen kommentar schreiben", "kommentar verfassen",
    "antwort hinterlassen",
    "a lire aussi", "à lire également", "voir aussi", "articles liés", "articles connexes",
    "vous aimerez peut-être aussi", "à découvrir aussi", "à découvrir également", "les plus lus",
    "derniers articles", "articles récents", "partager", "partager cet article", "partagez cet article",
    "partager sur facebook", "laisser une réponse", "vos réactions", "réagir",
    "también te puede interesar", "le puede interesar", "te podría interesar", "lee también", "lea también",
    "leer más", "ver también", "lo más leído", "más leídas", "lo más visto", "últimas noticias", "compartir",
    "comparte este artículo", "deja una respuesta",
    "potrebbe interessarti anche", "potrebbe interessarti", "ti potrebbe interessare", "leggi pure", "i più letti",
    "più letti", "ultime notizie", "condividi", "condividi questo articolo", "lascia una risposta",
    "leia mais", "artigos relacionados", "mais lidas", "mais lidos", "compartilhe", "compartilhar", "partilhar",
    "deixe uma resposta",
    "lees ook", "lees meer", "gerelateerde berichten", "meest gelezen", "delen", "deel dit artikel",
    "geef een reactie",
    "zobacz też", "czytaj też", "czytaj również", "polecamy", "najczęściej czytane", "najnowsze", "udostępnij",
    "dodaj komentarz"))
# - A page widget's line: a print button, a loading placeholder, a link back to the top or to more, and the
#   reading time templates print under a headline ("5 min read", "Lesezeit: 4 Min."; digits as 0 here). Not
#   "Learn more": WCXB's annotators keep it as often as not, as a service page's own link.
WIDGET_LABELS = frozenset((
    "print", "drucken", "imprimer", "stampa", "imprimir", "afdrukken", "drukuj", "loading", "wird geladen",
    "chargement", "cargando", "caricamento", "carregando", "ładowanie", "back to top", "scroll to top",
    "nach oben", "zurück nach oben", "retour en haut", "volver arriba", "torna su", "voltar ao topo",
    "terug naar boven", "do góry",
    "0 min read", "0 mins read", "0 minute read", "0 minutes read", "0 min. read", "reading time: 0 min",
    "reading time 0 min", "reading time: 0 minutes", "0 min reading time", "lesezeit: 0 min", "lesezeit 0 min",
    "lesezeit: 0 minuten", "0 min. lesezeit", "0 min lesezeit", "0 minuten lesezeit", "lesedauer: 0 min",
    "lesedauer: 0 minuten", "lesedauer 0 min", "temps de lecture : 0 min", "temps de lecture: 0 min",
    "temps de lecture : 0 minutes", "0 min de lecture", "lecture : 0 min", "tiempo de lectura: 0 min",
    "tiempo de lectura: 0 minutos", "0 min de lectura", "0 minutos de lectura", "tempo di lettura: 0 min",
    "tempo di lettura: 0 minuti", "0 min di lettura", "tempo de leitura: 0 min", "0 min de leitura",
    "leestijd: 0 min", "leestijd 0 min", "leestijd: 0 minuten", "0 min leestijd", "czas czytania: 0 min",
    "0 min czytania"))
_LABELS = SECTION_LABELS | WIDGET_LABELS
_DIGITS = re.compile(r"\d+")
_SECTION_MAX_CHARS = 60  # longer than any label with its bullets and count: prose never gets normalised
_SECTION_EDGES = " \t\u00a0•·▪◦‣*-–—>»›▸►→↑:.…!?|"
_SECTION_COUNT = re.compile(r"\s*(?:\(\d{1,6}\)|\[\d{1,6}\]|\d{1,3})$")  # "(11)", "5"; not a year
# - A web form's notices, in a line of under 400 characters: WordPress's own comment-form strings ("Your email
#   address will not be published.", "Required fields are marked *", "This entry was posted in ... Bookmark the
#   permalink.") in English and in its translations, on every blog the platform renders, and Webflow's
#   submission messages ("Thank you! Your submission has been received!").
FORM_NOTICES = (
    "your email address will not be published", "required fields are marked",
    "save my name, email, and website in this browser", "this entry was posted in", "bookmark the permalink",
    "deine e-mail-adresse wird nicht veröffentlicht", "ihre e-mail-adresse wird nicht veröffentlicht",
    "erforderliche felder sind mit", "meinen namen, meine e-mail-adresse und meine website in diesem browser",
    "dieser eintrag wurde veröffentlicht in", "lesezeichen für den permalink",
    "votre adresse e-mail ne sera pas publiée", "votre adresse de messagerie ne sera pas publiée",
    "les champs obligatoires sont indiqués", "tu dirección de correo electrónico no será publicada",
    "los campos obligatorios están marcados", "il tuo indirizzo email non sarà pubblicato",
    "i campi obbligatori sono contrassegnati", "o seu endereço de email não será publicado",
    "o seu endereço de e-mail não será publicado", "campos obrigatórios são marcados",
    "je e-mailadres wordt niet gepubliceerd", "vereiste velden zijn gemarkeerd met",
    "twój adres e-mail nie zostanie opublikowany", "wymagane pola są oznaczone",
    "thank you! your submission has been received", "oops! something went wrong while submitting the form")
_FORM_MAX_CHARS = 400
# - A call to action of the site's own, in a line of under 200 characters: newsletter sign-ups ("Subscribe to
#   our newsletter", "Newsletter abonnieren", "delivered straight to your inbox", "direkt in dein Postfach"),
#   requests to share or follow ("Dir hat der Artikel gefallen? Jetzt teilen", "If you enjoyed this post"),
#   a CAPTCHA's reload prompt, and the placeholder of an embedded video whose cookies were not accepted. An
#   article's own sentence is rarely that short and says so; a longer line that holds one stays.
CALL_TO_ACTION_NOTICES = (
    "sign up for our newsletter", "subscribe to our newsletter", "sign up to our newsletter",
    "sign up for the newsletter", "subscribe to the newsletter", "to your inbox", "in your inbox",
    "never miss a post", "never miss another article", "don't miss a post", "enjoyed this article",
    "liked this article", "enjoyed this post", "liked this post", "reload captcha", "accept cookies to",
    "newsletter abonnieren", "zum newsletter anmelden", "für unseren newsletter", "für den newsletter an",
    "newsletter bestellen", "unseren newsletter", "in ihr postfach", "in dein postfach", "in ihren posteingang",
    "in deinen posteingang", "nichts mehr verpassen", "nichts mehr versäumen", "artikel gefallen?",
    "beitrag gefallen?", "cookies akzeptieren",
    "abonnez-vous à notre newsletter", "inscrivez-vous à notre newsletter", "inscrivez-vous à la newsletter",
    "recevez notre newsletter", "dans votre boîte mail", "dans votre boîte de réception", "ne manquez plus",
    "ne ratez plus", "vous avez aimé cet article", "accepter les cookies",
    "suscríbete a nuestro boletín", "suscríbete a nuestra newsletter", "suscríbete a la newsletter",
    "en tu bandeja de entrada", "te ha gustado este artículo", "aceptar las cookies",
    "iscriviti alla nostra newsletter", "iscriviti alla newsletter", "nella tua casella di posta",
    "non perdere più", "ti è piaciuto questo articolo", "accettare i cookie",
    "assine nossa newsletter", "inscreva-se na nossa newsletter", "na sua caixa de entrada", "gostou deste artigo",
    "schrijf je in voor onze nieuwsbrief", "meld je aan voor onze nieuwsbrief", "in je inbox",
    "zapisz się do newslettera", "zapisz się na newsletter", "podobał ci się ten artykuł")
_CALL_TO_ACTION_MAX_CHARS = 200


def _anchored(notices: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The notices grouped under anchors: a word of 5 or more characters that several of them hold (the one
    most hold first, then the next among the rest), or a notice alone. A notice occurs in a text only where
    its anchor does, so a text is searched for each anchor and for the notices of the anchors it holds."""
    left, groups = list(notices), []
    while left:
        holders = {}
        for notice in left:
            for word in set(notice.split()):
                if len(word) >= 5:
                    holders.setdefault(word, []).append(notice)
        anchor, group = max(holders.items(), key=lambda item: (len(item[1]), item[0]), default=("", []))
        if len(group) < 2:
            break
        groups.append((anchor, tuple(group)))
        left = [notice for notice in left if notice not in group]
    return tuple(groups) + tuple((notice, (notice,)) for notice in left)


_NOTICE_KINDS = ((_anchored(FORM_NOTICES), _FORM_MAX_CHARS),
                 (_anchored(CALL_TO_ACTION_NOTICES), _CALL_TO_ACTION_MAX_CHARS))


def section_label(line: str) -> str | None:
    """The SECTION_LABELS or WIDGET_LABELS entry `line` is (normalised: lower case, single spaces, without
    its edges and a section's count; a widget's digits as 0), or None."""
    if len(line) > _SECTION_MAX_CHARS:
        return None
    key = " ".join(line.strip(_SECTION_EDGES).lower().split())
    if key in _LABELS:
        return key
    if not key or not any(map(str.isdigit, key)):
        return None
    if _DIGITS.sub("0", key) in WIDGET_LABELS:
        return key
    bare = _SECTION_COUNT.sub("", key).strip(_SECTION_EDGES)
    return bare if bare in SECTION_LABELS else None


# A line that begins with one of the labels: the one test most lines fail.
_LABEL_START = re.compile(r"[\s\-–—\[(]*(?:" + "|".join(re.escape(s) for s in AD_LABELS + CREDIT_LABELS) + ")", re.I)


def _is_label_line(line: str) -> bool:
    n = len(line)
    if n < _AD_LABEL_MAX_CHARS and _AD_LABEL.match(line):
        return True
    return n < _CREDIT_MAX_CHARS and _CREDIT.match(line) is not None and len(line.split()) <= CREDIT_MAX_WORDS + 2


def remove_label_lines(text: str) -> tuple[str, int]:
    """(text without lines that are only an ad slot's label (AD_LABELS), a photo credit (CREDIT_LABELS),
    skip links (SKIP_LINKS), a section heading (SECTION_LABELS) or a widget's (WIDGET_LABELS), or hold a
    form's notice (FORM_NOTICES) or a call to action (CALL_TO_ACTION_NOTICES), and without the tail from a
    TAIL_SECTIONS heading in the text's second half; number of lines removed)."""
    lines = text.split("\n")
    drop = {k for k, line in enumerate(lines)
            if len(line) < _CREDIT_MAX_CHARS and _LABEL_START.match(line) and _is_label_line(line)
            or len(line) < _SKIP_MAX_CHARS and _SKIP_START.match(line) and _is_skip_link_line(line)}
    for anchored, max_chars in _NOTICE_KINDS:
        short = [k for k, line in enumerate(lines) if len(line) < max_chars]
        lowered = "\n".join(lines[k] for k in short).lower()  # the lines that may go: prose lines are longer
        notices = [notice for anchor, group in anchored if anchor in lowered  # substring scans: linear time
                   for notice in group if notice in lowered]
        if notices:  # the lines only where they hold a notice
            drop.update(k for k in short if any(notice in lines[k].lower() for notice in notices))
    starts = None  # each line's offset in the text, computed once, when a tail heading is first met
    for k in [k for k, line in enumerate(lines) if len(line) <= _SECTION_MAX_CHARS]:
        label = section_label(lines[k])
        if label is None:
            continue
        if label in TAIL_SECTIONS:
            starts = starts or [0, *accumulate(len(line) + 1 for line in lines)]
            if starts[k] >= len(text) / 2:
                drop.update(range(k, len(lines)))
                break
        drop.add(k)
    if not drop:
        return text, 0
    return join_without(lines, drop), sum(1 for k in drop if lines[k].strip())


# A URL, or a domain name with an optional path. A domain's labels are atomic and bounded as DNS bounds them
# (RFC 1035: labels of at most 63 characters, at most 127 of them): with `[\w-]+(?:\.[\w-]+)*` the engine
# retried every split of a long dotted run at every word boundary in it, quadratic ("a-.a-.a-..." 48 kB: 40 s);
# now linear (the same 48 kB: 0.5 s), and the same matches on the 48,734 lines of the real, scrapinghub and
# mixed-dev texts (a shorter label never helps: the next character must be a dot).
_LINK = re.compile(r"(?:https?://|www\.)\S+|\b(?>[\w-]{1,63})(?:\.(?>[\w-]{1,63})){0,126}\.[a-z]{2,63}\b(?:/\S*)?",
                   re.I)
# Every _LINK match holds a mark: "://", or a dot followed by two letters (".tld", and the dot of "www." when
# a domain follows it) or ending "www." (any other "www." link), and marks do not overlap, so a line with
# fewer than MIN_LINKS marks has fewer than MIN_LINKS links. Prose has almost none (a full stop is followed
# by a space), so one scan of the whole text for them leaves _LINK, which costs ~4x more, to the few lines
# that have MIN_LINKS (no mark spans a line break, so the marks of each line are the ones a scan of that
# line alone finds). Two scans, each for a pattern that starts with one literal character, which the regex
# engine skips to: together 6x faster than one pattern whose first character is one of several (~15 against
# ~100 us on a scrapinghub page's text; the same marks counted per line on 3,807 real and mixed-dev texts).
_DOT_MARK = re.compile(r"\.(?:[a-z]{2}|(?<=www\.))", re.I)
_SCHEME_MARK = re.compile("://")
_SEPARATORS = re.compile(r"[\s|·•,;/\-–—>»]+")
MIN_LINKS, LINK_SHARE = 3, 0.8


def _is_link_list(line: str) -> bool:
    links = _LINK.findall(line)
    if len(links) < MIN_LINKS:
        return False
    chars = len(_SEPARATORS.sub("", line))
    return sum(len(_SEPARATORS.sub("", link)) for link in links) >= LINK_SHARE * chars


def remove_link_list_lines(text: str) -> tuple[str, int]:
    """(text without lines of >= MIN_LINKS links that make up >= LINK_SHARE of the line's characters
    once separators are set aside, number of lines removed)."""
    marks = [m.start() for m in _DOT_MARK.finditer(text)]
    if "://" in text:
        marks = sorted(marks + [m.start() for m in _SCHEME_MARK.finditer(text)])
    if len(marks) < MIN_LINKS:
        return text, 0
    lines = text.split("\n")
    starts = list(accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    per_line = Counter(bisect_right(starts, at) - 1 for at in marks)
    drop = {k for k, n in per_line.items() if n >= MIN_LINKS and _is_link_list(lines[k])}
    if not drop:
        return text, 0
    return "\n".join(line for k, line in enumerate(lines) if k not in drop).strip(), len(drop)


# Why a page repeats a sentence a few times, and which repeats stay. Page markup renders one text more than
# once: a gallery's caption in the slide list ("• caption"), in full ("caption. less"), collapsed ("cap... more")
# and on the slide (Hearst AP stories of scrapinghub's benchmark: 4 copies once bullets and toggles are set
# aside, 0.064 of a story's characters where FineWeb's char_duplicates_ratio allows 0.01; Penedo et al. 2024,
# datatrove FineWebQualityFilter), desktop and mobile copies of a teaser, a pull quote beside its paragraph. Each
# copy after the first is noise, and the repetition rules drop the whole article for it. Two kinds of copy go:
# - a line that ends a sentence (a bracketed credit after it aside: "... Colo. (AP Photo/David Zalubowski)")
#   and occurs 2..`max_copies` times keeps its first occurrence; lines are compared stripped, without a leading
#   list bullet or a trailing "less" / "more" toggle (`_copy_key`);
# - a truncated copy: a line cut off by an ellipsis ("...", "…", then maybe a "more" / "read more" toggle)
#   whose text before it begins another, longer line of the page. It is that line collapsed (the same Hearst
#   galleries show a long caption once in full, "... less", and once cut, "... more", and a teaser list
#   cuts the paragraph the page also holds in full), so it holds no word the page does not; these need
#   not end a sentence, the line they begin is on the page.
# Three kinds of repeat stay, every copy, as the rules' evidence:
# - lines on the page more than `max_copies` times: a spam or generator loop (8 to 40 copies on mixed-dev's
#   junk pages; no line of the real pages of the shared data repeats 5 to 7 times);
# - lines that do not end a sentence: a menu or a list of links shown in the header and again in the footer is
#   what the duplicate-line rules are for (a real spam page of the bundled Common Crawl excerpt, 0513mt.com,
#   is caught only by its two copies of a story-title list), as is a weak model's repeated heading;
# - lines under `min_chars` (for a truncated copy: its text before the ellipsis): a caption, teaser or pull
#   quote is a full sentence or more, while a shorter repeated line is as often a list entry that repeats
#   with meaning (one author list under two papers, a meal plan's "Portion Fix Containers: 1 Purple, 1 Red,
#   1 tsp." on several days: both on real pages of the bundled sample), and braces, "Reply" or a refrain
#   repeat for reasons of their own. The same meal plan's longer entries (66 and 74 characters, 3 and 4 times)
#   do go: a list entry that long and that often is what the rule cannot tell from a caption.
RENDERING_MAX_COPIES, RENDERING_MIN_CHARS = 4, 60
# The ellipsis and toggle that end a truncated copy, searched for in the last _TRUNCATED_TAIL characters only
# (a search of the whole line would retry its leading \s* at every blank of a long run: quadratic).
_TRUNCATED = re.compile(r"(?:\.\.\.|…)(?:\s*(?:read\s+|show\s+|see\s+)?more)?$", re.I)
_TRUNCATED_TAIL = 32


def remove_rendering_copies(text: str, max_copies: int = RENDERING_MAX_COPIES,
                            min_chars: int = RENDERING_MIN_CHARS) -> tuple[str, int]:
    """(text without rendering copies, the number of lines removed), lines compared stripped: a truncated
    copy (a line of >= `min_chars` characters before a trailing ellipsis that another, longer line
    begins with) goes, and of every other line of >= `min_chars` characters that ends a sentence and
    occurs 2..`max_copies` times only the first occurrence stays. `max_copies` < 2: unchanged."""
    if max_copies < 2:
        return text, 0
    lines = text.split("\n")
    keys = [_copy_key(key) if key[:1] in _COPY_BULLETS or key[-4:] in _COPY_TOGGLES else key
            for key in map(str.strip, lines)]
    copies = _truncated_copies(keys, min_chars) if "..." in text or "…" in text else set()
    counts = Counter(key for k, key in enumerate(keys)
                     if len(key) >= min_chars and k not in copies and _ends_sentence(key))
    repeated = {key for key, n in counts.items() if 1 < n <= max_copies}
    if not repeated and not copies:
        return text, 0
    seen = set()
    for k, key in enumerate(keys):
        if key in repeated:
            if key in seen:
                copies.add(k)  # the first occurrence stays
            seen.add(key)
    return join_without(lines, copies), len(copies)


# What a rendering copy may differ by: a list bullet before it (a gallery's slide list), a "less" / "more"
# toggle after its last sentence (the expanded caption's collapse link).
_COPY_BULLETS = frozenset("•·▪◦‣*-")
_COPY_TOGGLES = frozenset(("less", "more", "Less", "More", "LESS", "MORE"))
_COPY_BULLET = re.compile(r"[•·▪◦‣*\-]\s+")
_COPY_TOGGLE = re.compile(r"(?<=[.!?\"”’)])(?<!\.\.\.)\s+(?:show\s+|read\s+)?(?:less|more)$", re.I)  # not "... more"
# A sentence end followed by a bracketed credit: "... in Littleton, Colo. (AP Photo/David Zalubowski)".
_CREDIT_END = re.compile(r"[.!?]\s*\([^()]{1,80}\)$")


def _copy_key(key: str) -> str:
    """The text a rendering copy of the stripped line `key` shares with it: without a leading bullet or a
    trailing toggle."""
    if key[:1] in _COPY_BULLETS and (bullet := _COPY_BULLET.match(key)):
        key = key[bullet.end():]
    if key[-4:].lower() in _COPY_TOGGLES and (toggle := _COPY_TOGGLE.search(key, max(0, len(key) - 24))):
        key = key[:toggle.start()]
    return key


def _ends_sentence(key: str) -> bool:
    """`key` ends a sentence, perhaps followed by a bracketed credit."""
    return ends_with_terminal(key) or (key[-1] == ")" and _CREDIT_END.search(key, max(0, len(key) - 84)) is not None)


def _truncated_copies(keys: list[str], min_chars: int) -> set[int]:
    """Indexes of the stripped lines `keys` that are truncated copies of a longer line among them."""
    cut = {}
    for k, key in enumerate(keys):
        tail = max(0, len(key) - _TRUNCATED_TAIL)
        end = _TRUNCATED.search(key, tail)
        if end is not None and len(prefix := key[:end.start()].rstrip()) >= min_chars:
            cut[k] = prefix
    if not cut:
        return set()
    ordered = sorted(set(keys))  # the lines a prefix begins follow it in sorted order
    copies = set()
    for k, prefix in cut.items():
        at = bisect_left(ordered, prefix)
        while at < len(ordered) and ordered[at].startswith(prefix):
            if ordered[at] != keys[k]:  # another line than the truncated one itself
                copies.add(k)
                break
            at += 1
    return copies


def clean_for_rules(text: str, c4_lines: bool, link_lines: bool, model_lines: bool = False,
                    rendering_max_copies: int = 0, label_lines: bool = False) -> tuple[str, dict[str, int]]:
    """The text the quality rules judge, and the lines each step removed (the quality stage's
    `boilerplate_model_lines`, `boilerplate_lines`, `label_lines`, `link_list_lines` and
    `rendering_copy_lines` scores)."""
    removed = {}
    if model_lines:
        text, removed["boilerplate_model_lines"] = remove_context_boilerplate(text)
    if c4_lines:
        text, removed["boilerplate_lines"] = remove_boilerplate_lines(text)
    if label_lines:
        text, removed["label_lines"] = remove_label_lines(text)
    if link_lines:
        text, removed["link_list_lines"] = remove_link_list_lines(text)
    if rendering_max_copies >= 2:
        text, removed["rendering_copy_lines"] = remove_rendering_copies(text, rendering_max_copies)
    return text, removed
