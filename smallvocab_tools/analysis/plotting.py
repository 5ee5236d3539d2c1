"""The few lines every PNG plot of the scripts shares (matplotlib, headless);
imported by the scripts of this folder."""


def new_figure(figsize=(6, 4)):
    """(matplotlib.pyplot, figure, axes) with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    return plt, fig, ax


def finish(plt, fig, ax, path, xlabel, ylabel, title, grid_axis="both"):
    """Labels, grid and legend, then the PNG at ``path``; returns ``path``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis=grid_axis, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
