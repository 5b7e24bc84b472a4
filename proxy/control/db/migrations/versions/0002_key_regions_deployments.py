"""keys: residency pin (regions) and deployment allow-list (deployments)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('keys') as batch:
        batch.add_column(sa.Column('regions', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('deployments', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('keys') as batch:
        batch.drop_column('deployments')
        batch.drop_column('regions')
