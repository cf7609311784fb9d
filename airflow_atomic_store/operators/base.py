"""What the three atomic operators share: rendering, the hook, errors, logging, short-circuit."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, MutableMapping, Sequence
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

import jinja2
from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator, SkipMixin

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    IdempotencyKeyError,
    MutationError,
    ResultTooLargeError,
    SpecError,
    StoreLocationError,
)
from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.metrics import PrimitiveMetrics
from airflow_atomic_store.store import AtomicStore
from airflow_atomic_store.templating import (
    AtomicNamespace,
    as_text,
    ensure_namespace,
    render_value,
    task_instance_key,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


_RETURN_KEY = "return_value"
#: Errors a retry cannot fix: the task fails at once, without retries.
_FINAL_ERRORS: dict[type[Exception], str] = {
    SpecError: "invalid spec",
    MutationError: "mutation cannot apply",
    IdempotencyKeyError: "idempotency key reused",
    AccessDeniedError: "access denied",
    StoreLocationError: "no store can open there",
    ResultTooLargeError: "result too large for its receipt",
}


def store_defaults(verb: str) -> Mapping[str, Any]:
    """``AtomicStore.<verb>``'s keyword defaults: an operator's defaults are the store's."""
    parameters = inspect.signature(getattr(AtomicStore, verb)).parameters.values()
    return MappingProxyType({p.name: p.default for p in parameters if p.default is not p.empty})


class BaseAtomicOperator(BaseOperator, SkipMixin):
    """Run one atomic primitive against the store behind ``conn_id``; return its result dict.

    Subclasses say which primitive to run (:meth:`run_primitive`), how to describe the
    outcome in the log (:meth:`describe`) and when a result counts as empty
    (:meth:`is_empty`). Everything else lives here:

    * templates: every string in a templated field is rendered with the ``atomic``
      namespace, and a lone ``{{ … }}`` keeps its native type, except in the fields
      that can only be text (:attr:`text_fields`), which take its text as Airflow's
      own rendering would (``42`` -> ``"42"``). This is done in
      :meth:`render_template`, which both mapped and unmapped tasks go through.
    * errors: an invalid spec or a mutation that cannot apply fails the task
      without retries (retrying cannot fix it); so does a template that fails to
      render (an undefined variable, a syntax error) or that renders a whole field to
      nothing (``None`` or blank text: only a literal ``None``/``[]`` in the DAG leaves
      a field empty). Anything else (a database outage) fails it normally so that
      ``retries`` apply.
    * ``short_circuit``: an empty result skips every downstream task; this task
      still succeeds and its ``return_value`` XCom still holds the result.
    * metrics: each call is counted and timed through Airflow's ``Stats``
      (:mod:`airflow_atomic_store.metrics`), with its empty results, replays, rows
      and errors by kind.
    * retries: Airflow runs a task at least once. Each task instance calls its
      primitive with the idempotency key ``{dag_id}/{run_id}/{task_id}/{map_index}``
      (never the try number), so a retry after the store committed applies nothing
      and replays the first try's result (``replayed: true``).

    :param conn_id: connection id of the store (templated).
    :param table: the logical table (templated).
    :param return_fields: keep only these top-level fields of returned values (templated).
    :param short_circuit: skip every downstream task when the result is empty.
    :param idempotency_key: the key instead of the task instance's own (templated).
    :param idempotent: False to apply the primitive on every try (no key at all).
    """

    template_fields_renderers: ClassVar[dict[str, str]] = {
        "where": "json",
        "mutations": "json",
        "insert_value": "json",
        "return_fields": "json",
    }
    #: Template fields that can only be text: a lone ``{{ … }}`` gives its ``str()``
    #: (see :func:`~airflow_atomic_store.templating.as_text`). Every other template
    #: field (where, mutations, insert_value, return_fields, limit) keeps native values.
    text_fields: ClassVar[frozenset[str]] = frozenset(
        {"conn_id", "table", "key", "match", "order_by", "direction", "idempotency_key", "mode"}
    )
    ui_color = "#d6eaf8"
    #: The primitive's name in metrics: ``atomic_store.<primitive>.<measure>``.
    primitive: ClassVar[str]
    #: Where a deferrable operator's wait stands when Airflow resumes it: ``(round,
    #: deadline, waited_out)``, set by :meth:`resume_after_wait` on the task's own copy of
    #: the operator. A tuple, never mutated: Airflow runs a shallow copy of the DAG's
    #: operator, and state mutated in place would leak into the DAG's next run.
    _resumed: tuple[int, str | None, bool] = (0, None, False)
    #: The template field being rendered, while it is (its elements are not checked alone).
    _rendering_field: str | None = None

    def __init__(
        self,
        *,
        conn_id: str = AtomicStoreHook.default_conn_name,
        table: str,
        return_fields: Sequence[str] | None = None,
        short_circuit: bool = False,
        idempotency_key: str | None = None,
        idempotent: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.table = table
        self.return_fields = return_fields
        self.short_circuit = short_circuit
        self.idempotency_key = idempotency_key
        self.idempotent = idempotent

    @property
    def inherits_from_skipmixin(self) -> bool:
        """Only a short-circuiting task can skip others (the scheduler checks its XCom)."""
        return bool(self.short_circuit)

    @cached_property
    def hook(self) -> AtomicStoreHook:
        return AtomicStoreHook(conn_id=self.conn_id)

    # -- rendering --------------------------------------------------------------------------

    def render_template(
        self,
        content: Any,
        context: Context,
        jinja_env: jinja2.Environment | None = None,
        seen_oids: set[int] | None = None,
    ) -> Any:
        """Render like Airflow, plus ``atomic`` and type-preserving lone expressions.

        Airflow renders a mapped task through ``_do_render_template_fields`` of the
        unmapped operator, which calls this method for every field, so overriding it
        (rather than ``render_template_fields``) covers mapped and unmapped tasks alike.
        A whole field's rendering is checked here too: a template error or a field
        rendered to nothing fails the task without retries (re-rendering gives the same).
        """
        ensure_namespace(cast("MutableMapping[str, Any]", context))
        if seen_oids is not None and id(content) in seen_oids:
            # A mapped value resolved from XCom at run time (a claimed key, say) is
            # data, never a template: Airflow passes its id here so it is not rendered.
            return content
        field = self._field_holding(content)
        if field is None:  # an element inside the field being rendered (or no field at all)
            return self._render_content(content, context, jinja_env, seen_oids)
        self._rendering_field = field
        try:
            rendered = self._render_content(content, context, jinja_env, seen_oids)
            if isinstance(content, str):
                rendered = self._checked_field(field, content, rendered)
        except SpecError as exc:
            raise self._final(exc) from exc
        except jinja2.TemplateError as exc:
            raise AirflowFailException(
                f"{self.task_id}: template error: {field}: {type(exc).__name__}: {exc} "
                "(not retried: rendering again gives the same error)"
            ) from exc
        finally:
            self._rendering_field = None
        return rendered

    def _checked_field(self, field: str, template: str, rendered: Any) -> Any:
        """A whole field rendered from a template: never nothing, and text where only text fits."""
        if _is_nothing(rendered):
            raise SpecError(
                field,
                f"the template {template!r} rendered to {rendered!r}; a template must "
                f"render to a value (to leave {field} empty, give None or [] in the DAG "
                "itself, not through a template)",
            )
        return as_text(rendered, field) if field in self.text_fields else rendered

    def _field_holding(self, content: Any) -> str | None:
        """The template field whose whole (unrendered) value ``content`` is, if any."""
        if self._rendering_field is not None:
            return None  # nested: the field being rendered already checks the whole
        return next(
            (name for name in self.template_fields if getattr(self, name, None) is content),
            None,
        )

    def _render_content(
        self,
        content: Any,
        context: Context,
        jinja_env: jinja2.Environment | None,
        seen_oids: set[int] | None,
    ) -> Any:
        if isinstance(content, str):
            return render_value(jinja_env or self.get_template_env(), content, context)
        return super().render_template(content, context, jinja_env, seen_oids)

    # -- execution --------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        namespace = ensure_namespace(cast("MutableMapping[str, Any]", context))
        metrics = PrimitiveMetrics(self.primitive, str(self.table), self.dag_id, self.task_id)
        try:
            with metrics.call():
                key = self._key_for(context)
                result = self.run_primitive(self.hook, namespace, key)
        except tuple(_FINAL_ERRORS) as exc:
            raise self._final(exc) from exc
        finally:
            self.hook.close()
        metrics.result(
            empty=self.is_empty(result),
            replayed=bool(result.get("replayed")),
            rows=self.rows_in(result),
        )
        self.log.info("%s", self.describe(result))
        if result.get("replayed"):
            self.log.info(
                "replayed: an earlier try of this task instance already applied this %s "
                "(idempotency key %r); nothing was applied again",
                type(self).__name__,
                key,
            )
        if self.short_circuit and self.is_empty(result):
            self._skip_downstream(context, result)
        return result

    def resume_after_wait(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        *,
        round: int = 1,
        deadline: str | None = None,
    ) -> dict[str, Any]:
        """Back from the triggerer (a deferrable operator's wait, ``operators/waiting.py``):
        attempt round ``round``, or wait again if another writer won meanwhile."""
        waited_out = bool(event) and event.get("status") == "timeout"  # type: ignore[union-attr]
        self._resumed = (round, deadline, waited_out)
        if waited_out:
            self.log.info("waited %ss: trying once more", getattr(self, "wait_timeout", None))
        return self.execute(context)

    def _final(self, exc: Exception) -> AirflowFailException:
        """The failure Airflow does not retry, for an error that retrying cannot fix."""
        label = next(text for kind, text in _FINAL_ERRORS.items() if isinstance(exc, kind))
        return AirflowFailException(
            f"{self.task_id}: {label}: {exc} (not retried: retrying cannot fix it)"
        )

    def _key_for(self, context: Context) -> str | None:
        """The task instance's idempotency key: the same on every try of it."""
        if not self.idempotent:
            return None
        if self.idempotency_key is None:
            return task_instance_key(context)
        if not isinstance(self.idempotency_key, str) or not self.idempotency_key.strip():
            raise SpecError(
                "idempotency_key",
                f"rendered to {self.idempotency_key!r}; give a non-empty key, or "
                "idempotent=False for none",
            )
        return self.idempotency_key

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        raise NotImplementedError

    def describe(self, result: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def rows_in(self, result: Mapping[str, Any]) -> int | None:
        """How many rows the result carries, for the ``rows`` metric (claims only)."""
        return None

    def _skip_downstream(self, context: Context, result: dict[str, Any]) -> None:
        """Skip every downstream task (teardowns excepted), keeping our result as XCom.

        Skipping ends ``execute()`` with an exception that Airflow turns into success,
        so the return value would never be pushed: push it here first.
        """
        ti = context["ti"]
        if self.do_xcom_push:
            if self.multiple_outputs:
                for key, value in result.items():
                    ti.xcom_push(key=key, value=value)
            ti.xcom_push(key=_RETURN_KEY, value=result)
        to_skip = [t for t in self.get_flat_relatives(upstream=False) if not t.is_teardown]
        if not to_skip:
            return
        self.log.info("result is empty: skipping %d downstream task(s)", len(to_skip))
        self.skip(ti=ti, tasks=to_skip)


def _is_nothing(rendered: Any) -> bool:
    """A rendered field that holds nothing: ``None``, an undefined value or blank text."""
    if rendered is None or isinstance(rendered, jinja2.Undefined):
        return True
    return isinstance(rendered, str) and not rendered.strip()
