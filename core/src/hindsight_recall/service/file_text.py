"""An uploaded file as text: plain text and Markdown as they are, HTML as Markdown, PDF as its pages' text.

The kind is read from the part's content type, else from the file name's extension (a client that sends
``application/octet-stream`` names the kind by the extension); anything else is refused with the list of
what is accepted. Text is UTF-8 unless the part's content type names a charset, a byte-order mark says
UTF-16 or UTF-32, or an HTML page declares its own; bytes that do not decode, NUL characters and files
with no text are refused, each with a message saying why, so that nothing half-read is ever stored.
"""

from __future__ import annotations

import codecs
import io
import re
from dataclasses import dataclass

from .errors import ServiceError

#: kind -> (content types, extensions)
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "text": (("text/plain",), (".txt", ".text")),
    "markdown": (("text/markdown", "text/x-markdown"), (".md", ".markdown")),
    "html": (("text/html", "application/xhtml+xml"), (".html", ".htm", ".xhtml")),
    "pdf": (("application/pdf",), (".pdf",)),
}
#: what the refusal of an unknown kind lists
ACCEPTED = "; ".join(f"{kind}: {', '.join(types + extensions)}" for kind, (types, extensions) in KINDS.items())
#: content types that name no kind (the extension decides)
GENERIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/binary"})
#: the elements of an HTML page whose text is not the page's text
HIDDEN = ("script", "style", "noscript", "template", "head", "svg", "iframe", "object", "img")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class Upload:
    """One uploaded file: its name, the content type its part declared, its bytes."""

    filename: str
    content_type: str
    data: bytes


def refuse(upload: Upload, status: int, code: str, why: str) -> ServiceError:
    return ServiceError(status, code, f"file {upload.filename!r}: {why}")


def kind_of(upload: Upload) -> str:
    """The file's kind, from its content type, else its extension; 415 when neither names one."""
    media = upload.content_type.split(";", 1)[0].strip().lower()
    for kind, (types, _) in KINDS.items():
        if media in types:
            return kind
    if media in GENERIC or media.startswith("text/"):
        name = upload.filename.lower()
        for kind, (_, extensions) in KINDS.items():
            if name.endswith(extensions):
                return kind
    raise refuse(upload, 415, "unsupported_file_type",
                 f"its type ({media or 'none given'}) is not one this server converts to text; it accepts {ACCEPTED}")


def to_text(upload: Upload) -> str:
    """The file's text (CPU-bound for PDF and HTML: call it off the event loop); refusals as the module says."""
    if not upload.data:
        raise refuse(upload, 400, "empty_file", "the file is empty")
    kind = kind_of(upload)
    if kind == "pdf":
        text = _pdf_text(upload)
    elif kind == "html":
        text = _html_text(upload)
    else:
        text = _decoded(upload, _charset(upload.content_type))
    if "\x00" in text:
        raise refuse(upload, 400, "binary_file", "it holds NUL characters, so it is not text; send text, "
                                                 "Markdown, HTML or PDF")
    text = _BLANK_LINES.sub("\n\n", text.replace("\r\n", "\n").replace("\r", "\n")).strip()
    if not text:
        raise refuse(upload, 400, "empty_file", "it holds no text" + (
            " (a scanned PDF's pages are images: this server reads no images)" if kind == "pdf" else ""))
    return text


def _charset(content_type: str) -> str | None:
    for part in content_type.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def _decoded(upload: Upload, charset: str | None, declared: str | None = None) -> str:
    """The bytes decoded: by the part's charset, a byte-order mark, UTF-8, then the page's own ``declared``."""
    data = upload.data
    chosen = charset or next((name for bom, name in _BOMS if data.startswith(bom)), None)
    last: UnicodeDecodeError | None = None
    for encoding in (chosen,) if chosen else ("utf-8", declared):
        if encoding is None:
            continue
        try:
            return data.decode(encoding)
        except LookupError:
            raise refuse(upload, 400, "unknown_charset", f"its charset {encoding!r} is not one Python "
                                                         "knows") from None
        except UnicodeDecodeError as exc:
            last = exc
    where = f" ({last.reason} at byte {last.start})" if last else ""
    raise refuse(upload, 400, "undecodable_text", f"its bytes are not {chosen or 'UTF-8'}{where}; send it as UTF-8 "
                 "or name its charset in the part's content type (e.g. text/plain; charset=latin-1)")


def _html_text(upload: Upload) -> str:
    """The page as Markdown: headings, lists, links and tables kept, markup, scripts and styles dropped."""
    # imported here: only an HTML upload needs them
    from bs4 import BeautifulSoup
    from bs4.dammit import EncodingDetector
    from markdownify import MarkdownConverter

    declared = EncodingDetector.find_declared_encoding(upload.data, is_html=True, search_entire_document=False)
    page = BeautifulSoup(_decoded(upload, _charset(upload.content_type), declared), "html.parser")
    title = page.title.get_text(strip=True) if page.title else ""
    for element in page.find_all(list(HIDDEN)):
        element.decompose()
    body = MarkdownConverter(heading_style="ATX", bullets="-", escape_misc=False).convert_soup(page)
    return f"# {title}\n\n{body}" if title and title not in body else body


def _pdf_text(upload: Upload) -> str:
    """The text of each page, pages apart by a blank line."""
    # imported here: only a PDF upload needs it
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(upload.data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise refuse(upload, 400, "encrypted_pdf", "the PDF is encrypted; send it without a password")
        pages = [page.extract_text() or "" for page in reader.pages]
    except ServiceError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise refuse(upload, 400, "unreadable_pdf", f"it is not a PDF that can be read ({exc})") from None
    return "\n\n".join(page.replace("\x00", "") for page in pages)
