"""The ``kshare`` command. Sub-commands live in their own modules; Typer commands stay sync."""

from __future__ import annotations

import typer

from . import capacity as capacity_cli
from . import configs as configs_cli
from . import consume as consume_cli
from . import dev
from . import dlq as dlq_cli
from . import groups as groups_cli
from . import plugins as plugins_cli
from . import sidecar as sidecar_cli
from . import state as state_cli

app = typer.Typer(
    name="kshare",
    help="kshare: Kafka share groups (KIP-932) for every cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(dev.app, name="dev")
app.add_typer(plugins_cli.app, name="plugins")
app.add_typer(sidecar_cli.app, name="sidecar")
app.add_typer(groups_cli.app, name="groups")
app.add_typer(configs_cli.app, name="configs")
app.add_typer(state_cli.app, name="state")
app.add_typer(dlq_cli.app, name="dlq")
app.command("consume", cls=groups_cli.OneLineCommand)(consume_cli.consume)
app.command("capacity", cls=groups_cli.OneLineCommand)(capacity_cli.capacity)


@app.command()
def demo(
    records: int = typer.Option(20_000, help="Records to produce."),
    consumers: int = typer.Option(4, help="Share consumers splitting the queue."),
) -> None:
    """Show share groups at work: a broker, a producer and several share consumers, live."""
    from .. import demo as demo_mod

    raise typer.Exit(demo_mod.run(records=records, consumers=consumers))


def main() -> None:
    app()
