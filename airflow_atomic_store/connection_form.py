"""The SQLite store connection's form in Airflow's UI, declared once for every Airflow line.

Airflow 3.2+ reads a connection type's form from provider info (``conn-fields`` and
``ui-field-behaviour``, see ``get_provider_info``); 3.0 and 3.1 read no form keys
there and ask the hook (``get_connection_form_widgets``, ``get_ui_field_behaviour``).
Both are built from :data:`FIELDS` and :data:`BEHAVIOUR`, so the forms cannot drift.
The fields are the store's options a SQLite connection takes as extras (the hook reads
them by these names); ``notify``, ``lock_timeout`` and ``statement_timeout`` are
PostgreSQL's, whose form belongs to the PostgreSQL provider: there they go in the
Extra JSON. The Extra box stays visible: the form writes into it.

Kept import-light (the providers manager reads provider info while Airflow starts);
the hook's WTForms widgets import WTForms only when 3.0/3.1 ask for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FormField:
    """One store option as a form field: the extra it is saved under, and its JSON type."""

    name: str
    label: str
    kind: str  # "string", "boolean" or "integer" (the types both form APIs share)
    description: str
    default: Any = None


FIELDS: tuple[FormField, ...] = (
    FormField(
        "storage_table",
        "Storage table",
        "string",
        "The physical table that holds every logical table (default atomic_store_rows).",
    ),
    FormField(
        "auto_claim_sets",
        "Automatic claimable sets (deprecated)",
        "boolean",
        "Ignored since 0.1.0: claims build no index. A queue's pending set comes with the "
        "schema; declare others with ensure_claim_index at deployment.",
        True,
    ),
    FormField(
        "receipt_retention",
        "Receipt retention (seconds)",
        "integer",
        "How long a keyed call's result is kept for replay (default 604800: 7 days).",
    ),
    FormField(
        "busy_timeout",
        "Busy timeout (seconds)",
        "integer",
        "How long a writer waits for the SQLite database lock.",
    ),
)

#: What Airflow's UI shows of a store connection (``ui/``): said where the form is filled in.
UI_NOTE = (
    "Browse > Atomic Store shows this store's tables, queue counts, claims, leases and "
    "receipts to roles that may read this connection; each task instance's Atomic Store "
    "tab shows what it claimed and holds here."
)

#: The standard fields: the store file is the host; nothing else of a URL applies. The
#: description's placeholder says what the UI shows of the connection.
BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["login", "password", "port", "schema"],
    "relabeling": {"host": "Absolute path of the store file"},
    "placeholders": {"host": "/abs/path/store.db", "description": UI_NOTE},
}


def conn_fields() -> dict[str, Any]:
    """Provider info's ``conn-fields`` (Airflow 3.2+): a JSON schema per field."""
    fields: dict[str, Any] = {}
    for field in FIELDS:
        schema: dict[str, Any] = {"type": [field.kind, "null"]}
        if field.default is not None:
            schema["default"] = field.default
        if field.kind == "integer":
            schema["minimum"] = 1
        fields[field.name] = {
            "label": field.label,
            "description": field.description,
            "schema": schema,
        }
    return fields


def provider_field_behaviour() -> dict[str, Any]:
    """Provider info's ``ui-field-behaviour`` (kebab-case keys)."""
    return {key.replace("_", "-"): value for key, value in BEHAVIOUR.items()}


def widgets() -> dict[str, Any]:
    """The hook's ``get_connection_form_widgets`` (Airflow 3.0/3.1): WTForms fields.

    Airflow's API server builds the form from them with WTForms stand-ins, which it puts
    in place only for the modules that are installed (WTForms comes with the FAB
    provider). So only WTForms is required here; FAB's text widget and Babel's
    translation are used when they are there, as the FAB UI renders them.
    """
    from wtforms import BooleanField, IntegerField, StringField
    from wtforms.validators import Optional

    label_text = _translation()
    text_widget = _text_widget()
    made: dict[str, Any] = {}
    for field in FIELDS:
        label = label_text(field.label)
        if field.kind == "boolean":
            made[field.name] = BooleanField(
                label, description=field.description, default=field.default
            )
        elif field.kind == "integer":
            made[field.name] = IntegerField(
                label, description=field.description, validators=[Optional()], **text_widget
            )
        else:
            made[field.name] = StringField(label, description=field.description, **text_widget)
    return made


def _translation() -> Any:
    try:
        from flask_babel import lazy_gettext
    except ImportError:
        return str
    return lazy_gettext


def _text_widget() -> dict[str, Any]:
    try:
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    except ImportError:
        return {}
    return {"widget": BS3TextFieldWidget()}
